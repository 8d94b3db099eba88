"""How many of PyTorch's device-generic properties that hold on cpu fail on tpu.

Runs tests/python/test_device_generic.py (PyTorch's common_device_type harness,
instantiated for cpu and tpu) in one eager mode, pairs every tpu test with its
cpu twin, and reports the tests that pass on cpu and fail on tpu, grouped by
the first line of their failure.

    .venv/bin/python tools/device_generic_report.py [--full] [--mode strict] [--json out.json] [-k EXPR]

--full sets TORCH_TPU_DEVICE_GENERIC=full (every OpInfo of op_db).
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = os.path.join(ROOT, "tests", "python", "test_device_generic.py")
_DEV = re.compile(r"_(tpu|cpu)(?=_|$)")


def _key(classname, name):
    cls = classname.rsplit(".", 1)[-1]
    for suffix in ("PRIVATEUSE1", "TPU", "CPU"):
        if cls.endswith(suffix):
            cls = cls[: -len(suffix)]
            break
    m = list(_DEV.finditer(name))
    if not m:
        return None, None
    last = m[-1]
    return last.group(1), cls + "::" + name[: last.start()] + "_<dev>" + name[last.end():]


def _first_line(text):
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("E ") or re.match(r"^\w*(Error|Exception)\b", line):
            return re.sub(r"0x[0-9a-f]+", "0x..", line[2:].strip() if line.startswith("E ") else line)[:160]
    return (text or "").strip().splitlines()[0][:160] if text else "?"


def parse(xml_path):
    out = {"cpu": {}, "tpu": {}}
    for tc in ET.parse(xml_path).getroot().iter("testcase"):
        dev, key = _key(tc.get("classname", ""), tc.get("name", ""))
        if dev is None:
            continue
        state, why = "pass", ""
        for tag in ("failure", "error"):
            e = tc.find(tag)
            if e is not None:
                state, why = "fail", _first_line((e.get("message") or "") + "\n" + (e.text or ""))
        if tc.find("skipped") is not None:
            state, why = "skip", (tc.find("skipped").get("message") or "")[:160]
        out[dev][key] = (state, why)
    return out


def report(res):
    cpu, tpu = res["cpu"], res["tpu"]
    cpu_pass = [k for k, (s, _) in cpu.items() if s == "pass"]
    # a tpu skip of a test that passes on cpu is a gap too (the known gaps skip on tpu, naming themselves)
    tpu_only = sorted(k for k in cpu_pass if tpu.get(k, ("missing", "not run on tpu"))[0] != "pass")
    groups = collections.Counter(tpu.get(k, ("missing", "not run on tpu"))[1] for k in tpu_only)
    frac = len(tpu_only) / max(1, len(cpu_pass))
    lines = [f"cpu: {len(cpu)} tests, {len(cpu_pass)} pass; tpu: {len(tpu)} tests, "
             f"{sum(1 for s, _ in tpu.values() if s == 'pass')} pass",
             f"tpu-only failures: {len(tpu_only)} of {len(cpu_pass)} that pass on cpu = {100 * frac:.2f}%"]
    for why, n in groups.most_common(40):
        lines.append(f"  {n:5d}  {why}")
    return "\n".join(lines), {"cpu_pass": len(cpu_pass), "tpu_only": tpu_only, "fraction": frac,
                              "groups": dict(groups)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--mode", default=os.environ.get("TORCH_TPU_EAGER_MODE", "strict"))
    ap.add_argument("--json")
    ap.add_argument("--xml", help="parse this junit xml instead of running")
    ap.add_argument("-k")
    a = ap.parse_args()
    xml = a.xml
    if xml is None:
        xml = os.path.join(tempfile.mkdtemp(prefix="device_generic_"), "junit.xml")
        env = dict(os.environ, TORCH_TPU_EAGER_MODE=a.mode,
                   TORCH_TPU_DEVICE_GENERIC="full" if a.full else os.environ.get("TORCH_TPU_DEVICE_GENERIC", "sample"))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST, f"--junitxml={xml}"]
        if a.k:
            cmd += ["-k", a.k]
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode
        if not os.path.exists(xml):  # the process died (a crash) before pytest wrote its report
            sys.exit(f"pytest exited with {rc} before writing {xml}: a crash; its stderr above names the test "
                     "(rerun the rest with -k or TORCH_TPU_DEVICE_GENERIC_SHARD)")
    text, data = report(parse(xml))
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
