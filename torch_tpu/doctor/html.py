"""The doctor's report as one self-contained HTML page: inline CSS and SVG,
no script and nothing fetched from the network, so it opens from a file
anywhere.  The findings and the readiness summary as in the text report,
and a timeline of one steady step: a row each for the programs run (device
time), compiles and disk loads, host waits and the program's host reads,
and the CPU fallbacks, with a tick for each flush (what cut the graph)."""
import html
import os

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.f{border-left:4px solid #c33;padding:.4em .8em;margin:.8em 0;background:#fbf7f7}
.f.host_read,.f.data_dependent_shape{border-color:#d80}.f.recompile{border-color:#36c}
.kind{font-weight:600;text-transform:uppercase;font-size:.8em;color:#555}
code{background:#eee;padding:0 .25em}.fix{color:#175}
table{border-collapse:collapse}td,th{padding:.15em .8em;text-align:left;border-bottom:1px solid #eee}
.ok{color:#175}.bad{color:#c33}svg text{font:11px sans-serif}
"""
_ROWS = [("execute", "programs (device)", "#36c"), ("compile", "compiles / loads", "#c33"),
         ("host", "host waits / reads", "#d80"), ("fallback", "CPU fallbacks", "#939")]
_ROW_OF = {"execute": "execute", "compile": "compile", "disk_load": "compile", "host_wait": "host",
           "host_read": "host", "fallback": "fallback"}


def _e(x):
    return html.escape(str(x))


def timeline_svg(tl, width=1000):
    """An SVG picture of the report's timeline (one steady step)."""
    left, row_h, top = 150, 26, 20
    total = max(tl["seconds"], 1e-6)
    scale = (width - left - 10) / total
    h = top + row_h * len(_ROWS) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" '
           f'aria-label="timeline of step {tl["step"]}">']
    for i, (key, label, color) in enumerate(_ROWS):
        y = top + i * row_h
        out.append(f'<text x="4" y="{y + 16}">{_e(label)}</text>'
                   f'<rect x="{left}" y="{y + 2}" width="{width - left - 10}" height="{row_h - 4}" fill="#f4f4f4"/>')
    for ev in tl["events"]:
        x0 = left + max(0.0, ev["start"]) * scale
        if ev["kind"] == "flush":
            out.append(f'<line x1="{x0:.1f}" x2="{x0:.1f}" y1="{top}" y2="{top + row_h}" stroke="#333" '
                       f'stroke-width="1"><title>flush ({_e(ev["detail"])}) {_e(ev["name"])}</title></line>')
            continue
        row = _ROW_OF.get(ev["kind"])
        if row is None:
            continue
        i = [r[0] for r in _ROWS].index(row)
        y = top + i * row_h
        w = max(1.0, (ev["end"] - ev["start"]) * scale)
        color = _ROWS[i][2]
        tip = f'{ev["kind"]}: {ev["name"]} {ev["detail"]} {1e3 * (ev["end"] - ev["start"]):.3f} ms'
        out.append(f'<rect x="{x0:.1f}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="{color}" '
                   f'opacity="0.8"><title>{_e(tip)}</title></rect>')
    y = top + row_h * len(_ROWS) + 16
    out.append(f'<text x="{left}" y="{y}">0</text><text x="{width - 90}" y="{y}">{1e3 * total:.2f} ms</text>')
    out.append("</svg>")
    return "".join(out)


def page(report):
    """The report as HTML text."""
    s, p = report["summary"], report["program"]
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           f"<title>torch_tpu doctor: {_e(' '.join(p['argv']))}</title><style>{_CSS}</style></head><body>",
           f"<h1>torch_tpu doctor: <code>{_e(' '.join(p['argv']))}</code></h1>",
           f"<p>eager mode <b>{_e(s['mode'])}</b>, {s['steps']} steps ({s['warmup_steps']} warm-up), "
           f"{p['wall_seconds']:.1f} s, ended: {_e(p['exit'])}" + (f" ({_e(p['error'])})" if p["error"] else "")
           + "</p>", "<h2>Findings</h2>"]
    if not report["findings"]:
        out.append('<p class="ok">None: no CPU fallback, no compile after the warm-up, no host read in the '
                   'loop.</p>')
    for f in report["findings"]:
        where = f"{_e(os.path.basename(f['file']))}:{f['line']}" if f["file"] else "(no source line)"
        out.append(f'<div class="f {_e(f["kind"])}"><div class="kind">{_e(f["kind"])}</div>'
                   f'<b>{_e(f["title"])}</b><br>at <code title="{_e(f["file"] or "")}">{where}</code> '
                   + (f'<code>{_e(f["code"])}</code>' if f["code"] else "") +
                   f'<br>cost {f["seconds"]:.3f} s over {f["count"]}: {_e(f["detail"])}'
                   f'<br><span class="fix">fix: {_e(f["fix"])}</span></div>')

    def mark(v):
        return f'<span class="{"ok" if v == 0 else "bad"}">{v}</span>'
    rows = [("steps/s (steady)", f"{s['steps_per_second']:.2f}" if s["steps_per_second"] is not None else "-"),
            ("programs per step", f"{s['programs_per_step']:.1f}" if s["programs_per_step"] is not None else "-"),
            ("compiles after warm-up (target 0)", mark(s["compiles_after_warmup"])),
            ("CPU fallbacks (target 0)", mark(s["fallbacks"])),
            ("compiles", f"{s['compiles']} ({s['compile_seconds']:.2f} s)"),
            ("wall time compiling", f"{100 * s['compile_share']['cold']:.0f}% cold, "
                                    f"{100 * s['compile_share']['warm']:.0f}% warm"),
            ("memory peak", f"{s['memory_peak_bytes']} bytes"),
            ("ready", '<span class="ok">yes</span>' if s["ready"] else '<span class="bad">no</span>')]
    cuts = report["cuts"]["per_step"] or report["cuts"]["total"]
    rows.append(("programs cut at", _e(", ".join(f"{k} {v:g}" for k, v in cuts.items())) or "-"))
    out.append("<h2>Readiness</h2><table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
               + "</table>")
    tl = report["timeline"]
    out.append("<h2>One steady step</h2>")
    if tl:
        out.append(f"<p>Step {tl['step']}; hover a bar for its name and time.</p>" + timeline_svg(tl))
    else:
        out.append("<p>No timeline: the program made fewer optimizer steps than the warm-up and one more.</p>")
    if report["programs"]:
        out.append("<h2>Slowest programs</h2><table><tr><th>device s</th><th>runs</th><th>ops</th><th>name</th></tr>"
                   + "".join(f"<tr><td>{q['execute_seconds']:.4f}</td><td>{q['executions']}</td><td>{q['ops']}</td>"
                             f"<td>{_e(q['name'])}</td></tr>" for q in report["programs"]) + "</table>")
    out.append("</body></html>\n")
    return "\n".join(out)
