"""python -m torch_tpu.doctor: the command line (see torch_tpu/doctor/__init__.py)."""
import argparse
import json
import sys

USAGE = ("python -m torch_tpu.doctor [--steps N] [--seconds S] [--json FILE] [--html FILE] script.py [args...]\n"
         "       python -m torch_tpu.doctor --tune [--steps N] [--json FILE] script.py [args...]\n"
         "       python -m torch_tpu.doctor [options] -m package.module [args...]")


def _parser():
    p = argparse.ArgumentParser(prog="python -m torch_tpu.doctor", usage=USAGE,
                                description="Runs a program on tpu with the engine's recording on and reports "
                                            "what makes it slow, at which source line, and the fix.")
    p.add_argument("--steps", type=int, default=None,
                   help="stop the program after N optimizer steps (the first 3 are the warm-up)")
    p.add_argument("--seconds", type=float, default=None, help="stop the program after S seconds")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (torch_tpu/doctor/schema.json)")
    p.add_argument("--html", metavar="FILE", help="write the report as one self-contained HTML page")
    p.add_argument("--quiet", action="store_true", help="print no report on the terminal")
    p.add_argument("--sync-steps", action="store_true",
                   help="wait for the device at the end of each step, so that step times are device times "
                        "(--tune's runs use it)")
    p.add_argument("--tune", action="store_true",
                   help="run the first --steps N steps (default 8) under each candidate configuration in fresh "
                        "processes, cold and warm program cache, and report the table and the best (tune.py)")
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # the doctor's options come before the program: the first word that is
    # not an option (or -m) starts the program's command line
    opts, i = [], 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
        opts.append(argv[i])
        if argv[i] in ("--steps", "--seconds", "--json", "--html") and i + 1 < len(argv):
            opts.append(argv[i + 1])
            i += 1
        i += 1
    program = argv[i:]
    args = _parser().parse_args(opts)
    if not program or (program[0] == "-m" and len(program) < 2):
        print("usage: " + USAGE, file=sys.stderr)
        return 2
    if args.steps is not None and args.steps < 1:
        print("torch_tpu.doctor: --steps must be at least 1", file=sys.stderr)
        return 2
    if args.tune:
        return _tune(args, program)
    from . import diagnose, report as report_mod

    rep = diagnose(program, steps=args.steps, seconds=args.seconds, sync_steps=args.sync_steps)
    sys.stdout.flush()
    if not args.quiet:
        print(report_mod.text(rep), file=sys.stderr)
    if args.json:
        report_mod.validate(rep)
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
    if args.html:
        from . import html
        with open(args.html, "w") as f:
            f.write(html.page(rep))
    return 1 if rep["program"]["exit"] == "error" else 0


def _tune(args, program):
    from . import tune
    if args.seconds is not None or args.html:
        print("torch_tpu.doctor: --tune takes --steps and --json (not --seconds or --html)", file=sys.stderr)
        return 2
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    res = tune.tune(program, steps=args.steps or tune.DEFAULT_STEPS, log=log)
    if not args.quiet:
        print(tune.text(res), file=sys.stderr)
    if args.json:
        tune.validate(res)
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if res["best"] else 1


if __name__ == "__main__":
    sys.exit(main())
