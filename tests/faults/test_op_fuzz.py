"""Op fuzzing (issue 28, item 4): fuzz_ops.py draws cases with hypothesis
(seeded: the same cases every run) and runs each on the CPU and on tpu.  Each
group runs in a child process under a deadline, so an abort, a segfault or a
hang is a failure that names the case it was running (fuzz_ops.py writes it
before it runs it); a mismatch is a failure that lists every such case.
TORCH_TPU_FUZZ_CASES sets the cases per group (80 by default; make
test-faults' sample), TORCH_TPU_FUZZ_SEED the seed.  `make test-faults-asan`
runs a share with our code built under AddressSanitizer
(TORCH_TPU_FUZZ_ASAN=1: the test checks that build is the one loaded)."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuzz_ops  # noqa: E402

COUNT = int(os.environ.get("TORCH_TPU_FUZZ_CASES", "80"))
SEED = int(os.environ.get("TORCH_TPU_FUZZ_SEED", "28"))
DEADLINE = 300


ASAN = os.environ.get("TORCH_TPU_FUZZ_ASAN") == "1"
if ASAN:
    DEADLINE *= 3  # our code runs ~2x slower instrumented; XLA's compiles do not


@pytest.mark.skipif(not ASAN, reason="the AddressSanitizer run only (make test-faults-asan)")
def test_asan_build_is_loaded():
    import torch_tpu
    so = torch_tpu._C.__file__
    assert os.sep + "asan" + os.sep in so, f"torch_tpu._C came from {so}, not build/asan"
    libs = open("/proc/self/maps").read()
    assert "libasan" in libs, "ASan's runtime is not in the process (LD_PRELOAD)"


@pytest.mark.parametrize("group", fuzz_ops.GROUPS)
def test_fuzzed_ops_match_cpu_or_raise_alike(group, tmp_path):
    out = str(tmp_path / f"{group}.json")
    env = dict(os.environ, TORCH_TPU_EAGER_MODE=os.environ.get("TORCH_TPU_EAGER_MODE", "strict"),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, os.path.join(HERE, "fuzz_ops.py"), "run", "--groups", group, "--count", str(COUNT),
           "--seed", str(SEED), "--out", out]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DEADLINE)
        text = r.stdout + r.stderr
        at = text.find("ERROR: AddressSanitizer")  # the report's head: what, where, which allocation
        rc, tail = r.returncode, (text[at:at + 6000] if at >= 0 else text[-3000:])
    except subprocess.TimeoutExpired as e:
        rc, tail = "timeout", str(e.stderr or "")[-3000:]
    current = out + ".current"
    if rc != 0:
        case = open(current).read() if os.path.exists(current) else "(no case written)"
        pytest.fail(f"the fuzzer's process ended with {rc} (abort, crash or hang) while running:\n  {case}\n"
                    f"reproduce: python tests/faults/fuzz_ops.py case '{case}'\n{tail}")
    with open(out) as f:
        res = json.load(f)
    assert res["cases"] == COUNT, res["by_group"]
    bad = res["failures"]
    assert not bad, f"{len(bad)} of {res['cases']} {group} cases differ from the CPU:\n" + "\n".join(
        f"  {json.dumps(x['case'])}\n    -> {x['why']}" for x in bad)
