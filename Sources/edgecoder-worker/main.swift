#if canImport(Glibc)
import Glibc
#endif
import WorkerCLI

exit(await CLI.main(CommandLine.arguments))
