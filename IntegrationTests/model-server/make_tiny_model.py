#!/usr/bin/env python3
"""Write a tiny random-weight llama model as GGUF, for tests against a real llama.cpp.

    make_tiny_model.py OUT.gguf [--seed N]

Architecture `llama`: 2 layers, embedding 64, 4 heads (head size 16), feed-forward 128,
context 512, F32 weights (about 0.3 MB). The tokenizer is a SentencePiece-style ("llama",
SPM) vocabulary that llama.cpp accepts: <unk>/<s>/</s>, the 256 byte-fallback tokens
<0x00>..<0xFF> (so ANY prompt tokenizes), printable ASCII characters, "▁"-prefixed letters
and a list of English words.

Random weights would emit </s> (ending the answer at once) or lone byte tokens (invalid
UTF-8, dropped on decoding) from time to time. To make every answer non-empty text, the
model is rigged: residual dimension 0 carries a constant (the token embeddings hold C in
it and no layer writes to it), and the output rows of every token that is not a word or
punctuation weigh that dimension by a large negative number. So only "▁word" tokens and
",", "." are ever sampled, whatever the prompt or sampler; generation stops only at
max_tokens / num_predict or at the context length. The text is garbage, and deterministic
for a fixed seed (the file itself is byte-identical from run to run).
"""

import argparse
import os
import sys

import numpy as np
import gguf

N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
N_CTX = 512
RMS_EPS = 1e-5
ROPE_BASE = 10000.0

WORDS = """
the of and to in is it that for on with as was at by be this are from or have an but not
they which you one were all we when there can had her his more will so no if out what up
about time who get would make like just him know take into year your good some could them
see other than then now look only come its over think also back after use two how our
work first well way even new want because any these give day most us code worker model
server token edge compute task result power queue node swift linux daemon test random
tiny garbage answer hello world loop fast slow light green blue red stone river cloud
""".split()

SPIECE = "\u2581"  # "▁", SentencePiece's word-boundary marker

TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_BYTE = (
    gguf.TokenType.NORMAL, gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.BYTE)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_vocab():
    tokens, scores, types, allowed = [], [], [], []

    def add(text, score, ttype, generate=False):
        if text in seen:
            return
        seen.add(text)
        if generate:
            allowed.append(len(tokens))
        tokens.append(text)
        scores.append(float(score))
        types.append(int(ttype))

    seen = set()
    add("<unk>", 0.0, TT_UNKNOWN)
    add("<s>", 0.0, TT_CONTROL)
    add("</s>", 0.0, TT_CONTROL)
    for b in range(256):
        add("<0x%02X>" % b, 0.0, TT_BYTE)
    add(SPIECE, -1.0, TT_NORMAL)
    for c in range(0x21, 0x7F):
        ch = chr(c)
        add(ch, -2.0, TT_NORMAL, generate=ch in ",.")
    for c in "abcdefghijklmnopqrstuvwxyz":
        add(SPIECE + c, -1.5, TT_NORMAL)
    # Whole words: a higher score for longer pieces, as a SentencePiece model would have.
    for w in WORDS:
        add(SPIECE + w, -10.0 + len(w), TT_NORMAL, generate=True)
    return tokens, scores, types, allowed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20240607)
    args = ap.parse_args()

    tokens, scores, types, allowed = build_vocab()
    n_vocab = len(tokens)
    rng = np.random.RandomState(args.seed)

    def rand(*shape, scale=None):
        fan_in = shape[-1]
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return (rng.standard_normal(shape) * s).astype(np.float32)

    CONST = 8.0
    tok_embd = rand(n_vocab, N_EMBD, scale=1.0)
    tok_embd[:, 0] = CONST

    # numpy shape is (out, in): GGUF dims are reversed ({in, out} = ne0, ne1).
    out_w = rand(n_vocab, N_EMBD)
    out_w[:, 0] = 0.0
    banned = np.ones(n_vocab, dtype=bool)
    banned[allowed] = False
    out_w[banned, 0] = -1000.0

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("edgecoder-tiny-random")
    w.add_description("Tiny random-weight llama for edgecoder-worker tests; output is garbage.")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_vocab_size(n_vocab)

    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", tok_embd)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", out_w)
    for i in range(N_LAYER):
        p = "blk.%d." % i
        attn_out = rand(N_EMBD, N_EMBD)
        attn_out[0, :] = 0.0   # keep residual dimension 0 constant
        ffn_down = rand(N_EMBD, N_FF)
        ffn_down[0, :] = 0.0
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_v.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_output.weight", attn_out)
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", ffn_down)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote %s: llama, %d layers, n_embd %d, %d heads, n_ctx %d, vocab %d (%d bytes)"
          % (args.out, N_LAYER, N_EMBD, N_HEAD, N_CTX, n_vocab, os.path.getsize(args.out)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
