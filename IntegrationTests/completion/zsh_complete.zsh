#!/usr/bin/env zsh
# zsh_complete.zsh FPATH_DIR LINE: types LINE and a Tab into a real interactive zsh (in a
# pseudo-terminal, zsh/zpty) whose $fpath starts with FPATH_DIR and which ran
# `autoload -U compinit; compinit`, the way a user's .zshrc loads completions. Prints what
# the terminal showed (the listing, if any) and then one line "BUFFER=[...]" with the
# command line after the Tab. Completion functions only run inside the line editor, so
# nothing short of a terminal exercises them. Run it under `timeout`: zpty -r waits.
emulate -L zsh
(( $# == 2 )) || { print -u2 "usage: zsh_complete.zsh FPATH_DIR LINE"; exit 64 }
zmodload zsh/zpty || exit 2
zpty -b comp zsh -f -i
# The prompt is spelt in two halves so that the echo of this line never matches it.
zpty -w comp "stty rows 200 cols 250; PS1='RE''ADY> '; fpath=(${(q)1} \$fpath); autoload -U compinit; compinit -u -D; \
report() { zle -M \"BUFFER=[\$BUFFER]EN\"\"D\" }; zle -N report; bindkey '^Xr' report"
zpty -r comp out '*READY> *' || exit 2
# A Tab, then the widget that reports the line: keys run in order, so it runs after the completion.
zpty -w -n comp "$2"$'\t'$'\x18r'
zpty -r comp out '*\]END*' || exit 2
# Strip the terminal's control sequences so that callers can grep the text.
print -r -- "${out//$'\e'\[[0-9;?]#[A-Za-z]/}" | tr -d '\r'
zpty -d comp
