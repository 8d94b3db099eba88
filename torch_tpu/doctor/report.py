"""The doctor's report as terminal text, and the check of a report against
schema.json (a small JSON Schema validator: the subset schema.json uses,
type / properties / required / additionalProperties / items / enum /
minimum, so that no package is needed to check a report)."""
import json
import os

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")


def _bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _where(f):
    if not f["file"]:
        return "(no source line outside torch)"
    return f"{os.path.relpath(f['file']) if not os.path.relpath(f['file']).startswith('..') else f['file']}:{f['line']}"


def text(report):
    """The report as text for the terminal."""
    s = report["summary"]
    p = report["program"]
    out = [f"torch_tpu doctor: {' '.join(p['argv'])}"]
    stop = {"completed": "ran to its end", "steps": f"stopped after {s['steps']} steps",
            "seconds": "stopped at --seconds", "error": "raised an exception"}[p["exit"]]
    out.append(f"  {stop} in {p['wall_seconds']:.1f} s, eager mode {s['mode']}")
    if p["error"]:
        out.append(f"  error: {p['error']}")
    findings = report["findings"]
    if findings:
        out.append("")
        out.append(f"findings ({len(findings)}, most costly first):")
        for i, f in enumerate(findings, 1):
            out.append(f"  {i}. [{f['kind']}] {f['title']}")
            out.append(f"     at {_where(f)}" + (f":  {f['code']}" if f["code"] else ""))
            out.append(f"     cost: {f['seconds']:.3f} s over {f['count']} occurrences; {f['detail']}")
            for a in f["also"]:
                out.append(f"     also: {a['file']}:{a['line']} ({a['count']})")
            out.append(f"     fix: {f['fix']}")
    else:
        out.append("")
        out.append("findings: none (no CPU fallback, no compile after the warm-up, no host read in the loop)")
    out.append("")
    out.append("readiness:")

    def target(v, t=0):
        return "ok" if v == t else f"target {t}"
    out.append(f"  steps             {s['steps']} ({s['warmup_steps']} warm-up, {s['steady_steps']} steady)")
    if s["steps_per_second"] is not None:
        out.append(f"  steps/s           {s['steps_per_second']:.2f} (steady)")
    if s["programs_per_step"] is not None:
        out.append(f"  programs/step     {s['programs_per_step']:.1f}")
    out.append(f"  compiles          {s['compiles']} ({s['compile_seconds']:.2f} s); after warm-up "
               f"{s['compiles_after_warmup']} ({target(s['compiles_after_warmup'])})")
    out.append(f"  compiling         {100 * s['compile_share']['cold']:.0f}% of wall time cold, "
               f"{100 * s['compile_share']['warm']:.0f}% warm")
    out.append(f"  CPU fallbacks     {s['fallbacks']} ({target(s['fallbacks'])})")
    if s["host_reads_per_step"] is not None:
        out.append(f"  host reads/step   {s['host_reads_per_step']:.1f}")
    out.append(f"  memory peak       {_bytes(s['memory_peak_bytes'])}")
    cuts = report["cuts"]
    if cuts["per_step"]:
        out.append("  programs cut at   " + ", ".join(f"{k} {v:.1f}/step" for k, v in cuts["per_step"].items()))
    elif cuts["total"]:
        out.append("  programs cut at   " + ", ".join(f"{k} {v}" for k, v in cuts["total"].items()))
    out.append(f"  ready             {'yes' if s['ready'] else 'no'}")
    if report["programs"]:
        out.append("")
        out.append("slowest programs (device seconds, runs, ops, name):")
        for q in report["programs"]:
            out.append(f"  {q['execute_seconds']:8.4f} {q['executions']:>6} {q['ops']:>5}  {q['name']}")
    return "\n".join(out)


# ---- validation ------------------------------------------------------------------

def schema():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, t):
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[t])


def validate(instance, sch=None, path="$"):
    """Raises ValueError naming the first place where instance breaks the
    schema (schema.json by default)."""
    sch = schema() if sch is None else sch
    types = sch.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_is(instance, t) for t in types):
            raise ValueError(f"doctor report: {path} is {type(instance).__name__}, expected {'/'.join(types)}")
    if "enum" in sch and instance not in sch["enum"]:
        raise ValueError(f"doctor report: {path} = {instance!r} is not one of {sch['enum']}")
    if "minimum" in sch and _is(instance, "number") and instance < sch["minimum"]:
        raise ValueError(f"doctor report: {path} = {instance!r} is below {sch['minimum']}")
    if isinstance(instance, dict):
        props = sch.get("properties", {})
        for k in sch.get("required", ()):
            if k not in instance:
                raise ValueError(f"doctor report: {path} has no {k!r}")
        extra = sch.get("additionalProperties", True)
        for k, v in instance.items():
            if k in props:
                validate(v, props[k], f"{path}.{k}")
            elif extra is False:
                raise ValueError(f"doctor report: {path} has an unexpected key {k!r}")
            elif isinstance(extra, dict):
                validate(v, extra, f"{path}.{k}")
    if isinstance(instance, list) and "items" in sch:
        for i, v in enumerate(instance):
            validate(v, sch["items"], f"{path}[{i}]")
