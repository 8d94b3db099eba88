"""python -m torch_tpu.run script.py [args...]   (or: -m module [args...])

Runs a program written for CUDA on tpu, unchanged: applies torch_tpu.transfer
(CUDA device strings, torch.cuda.*, autocast, GradScaler, nccl mapped to
tpu), then runs the script as __main__ with sys.argv set as if it had been
started by `python script.py args...`.  Programs started by other launchers
(torchrun) get the same with TORCH_TPU_TRANSFER=1 in their environment."""
import os
import runpy
import sys

USAGE = "usage: python -m torch_tpu.run script.py [args...]\n       python -m torch_tpu.run -m module [args...]"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    from . import transfer

    transfer.apply()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    path = argv[0]
    if not os.path.exists(path):
        print(f"torch_tpu.run: can't open file {path!r}: no such file", file=sys.stderr)
        return 2
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as `python script.py` sets it
    runpy.run_path(path, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
