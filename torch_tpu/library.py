"""torch_tpu.library: user kernels as PyTorch custom ops on tpu.

A kernel is StableHLO: a ``func.func`` the user writes (``stablehlo_op``),
or what ``jax.export`` makes of a JAX function (``jax_op``; Pallas kernels
come this way).  Either becomes a ``torch.library.custom_op`` ("ns::name")
whose tpu kernel records ONE engine node (the ``custom_kernel`` rule,
csrc/ops/custom.c): the program's ``@main`` calls the kernel's function
(``func.call``), so in fused mode and under ``torch.compile(backend="tpu")``
the kernel is part of the same program as the ops around it.

What a StableHLO kernel may be (``text``):

* one or more ``func.func`` definitions, in MLIR's pretty form
  (``func.func @f(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {...}``) or its
  generic form (``"func.func"() <{function_type = ..., sym_name = "f"}> ...``),
  or a whole ``module { ... }`` holding them (what ``jax.export`` emits);
* static shapes only; element types f16/bf16/f32/f64, i1, (u)i8..64,
  complex<f32/f64>; tensor arguments and results only.

The entry is ``entry=`` or else the module's only public function (or the
only function, or ``@main``).  Comments and locations (``loc(...)``,
``#loc`` aliases) are dropped, every function is made private and its symbol renamed to one
unique to the kernel text, so kernels never collide; the same kernel called
twice in one program is defined once.  The output shapes and dtypes come
from the entry's signature; the inputs must match its argument types
exactly (no implicit casts or broadcasts: a mismatch raises RuntimeError
naming the kernel and both type lists).  ``text`` may also be a callable
taking the inputs as meta tensors and returning the text for their shapes
and dtypes (one kernel variant per distinct shape/dtype list, cached).

Each variant is compiled once on its own when first used, so a kernel that
does not parse or compile raises RuntimeError at the call, naming the kernel
and its input types, and the rest of the program is untouched.

Autocast: a custom op's inputs are NOT cast (the op is on no autocast list;
it sees the dtypes its caller gives, and a text callable / JAX function is
exported for them).

The ops work with ``torch.library.register_autograd`` like any custom op;
``jax_op(..., vjp=True)`` registers JAX's ``jax.vjp`` of the function as the
backward (a second kernel, "ns::name_vjp").
"""
import hashlib
import inspect
import re
import threading

import torch

from . import _C
from ._dtypes import CODE as _CODE

__all__ = ["stablehlo_op", "jax_op", "parse_signature", "KernelError"]


class KernelError(RuntimeError):
    """A kernel's text or export is not usable (raised with the kernel's
    name and the input types)."""


# ---- MLIR text --------------------------------------------------------------------------

_ELEM = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
    "i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
    "si8": torch.int8, "si16": torch.int16, "si32": torch.int32, "si64": torch.int64,
    "ui8": torch.uint8, "ui16": torch.uint16, "ui32": torch.uint32, "ui64": torch.uint64,
    "complex<f32>": torch.complex64, "complex<f64>": torch.complex128,
}
_ELEM_NAME = {v: k for k, v in _ELEM.items() if not k.startswith("si")}


def _type_str(shape, dtype):
    name = _ELEM_NAME.get(dtype)
    if name is None:
        raise TypeError(f"tpu custom kernels do not support dtype {dtype}")
    return "tensor<" + "".join(f"{d}x" for d in shape) + name + ">"


def _parse_tensor_type(s, where):
    s = s.strip()
    m = re.fullmatch(r"tensor<(.*)>", s, re.S)
    if not m:
        raise KernelError(f"{where}: only tensor types are supported, got '{s}'")
    body = m.group(1).strip()
    if "," in body and not body.startswith("complex"):
        # tensor<4xf32, #encoding>
        body = body.split(",", 1)[0].strip()
    parts = body.split("x") if not body.startswith("complex") else [body]
    if body.endswith(">") and "complex<" in body:
        head, _, tail = body.rpartition("complex<")
        parts = [p for p in head.split("x") if p] + ["complex<" + tail]
    elem = parts[-1].strip()
    dims = []
    for d in parts[:-1]:
        d = d.strip()
        if d == "?" or not d.isdigit():
            raise KernelError(f"{where}: dynamic or malformed dimension '{d}' in '{s}' (static shapes only)")
        dims.append(int(d))
    if elem not in _ELEM:
        raise KernelError(f"{where}: element type '{elem}' in '{s}' is not supported")
    return tuple(dims), _ELEM[elem]


def _match(text, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[i] (strings
    are skipped)."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise _UnbalancedText(f"unbalanced '{open_ch}{close_ch}' in kernel text")


class _UnbalancedText(KernelError):
    """Raised where the text is scanned, which knows no kernel: the callers
    that know it (parse_signature, _Kernel.signature) name the kernel and its
    input types, as the other kernel errors do."""


def _split_top(s):
    """Splits at commas outside brackets and strings."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c == '"':
            j = i + 1
            while j < len(s) and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            cur.append(s[i:j + 1])
            i = j + 1
            continue
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


def _leading_type(s):
    """The type at the start of s ("tensor<...> {attrs} loc(...)")."""
    s = s.strip()
    if s.startswith("tensor<"):
        return s[:_match(s, s.index("<"), "<", ">")]
    return s.split()[0] if s else s


def _uncomment(line):
    """The line without a `//` comment (outside strings)."""
    i = line.find("//")
    while i >= 0:
        if line.count('"', 0, i) % 2 == 0:
            return line[:i].rstrip()
        i = line.find("//", i + 2)
    return line


def _strip_locations(text):
    """Drops `// comments`, `loc(...)` and `#locN = ...` lines (aliases are
    module-level and would collide between kernels)."""
    text = "\n".join(_uncomment(ln) for ln in text.splitlines() if not re.match(r"\s*#loc\w*\s*=", ln))
    out, i = [], 0
    for m in re.finditer(r"\bloc\(", text):
        if m.start() < i:
            continue
        # skip occurrences inside strings: count quotes before (cheap check)
        if text.count('"', i, m.start()) % 2:
            continue
        out.append(text[i:m.start()].rstrip(" "))
        i = _match(text, m.end() - 1, "(", ")")
    out.append(text[i:])
    return "".join(out)


def _module_body(text):
    """The contents of a `module ... { ... }` (the text unchanged if none)."""
    m = re.search(r"(^|\n)\s*(builtin\.)?module\b", text)
    if not m:
        return text
    # the module's body opens at the first '{' after its header's attributes
    j = m.end()
    am = re.match(r"\s*(@(?:[\w$.]+|\"[^\"]*\"))?\s*(attributes\s*)?", text[j:])
    j += am.end()
    if am.group(2):
        j = _match(text, text.index("{", j), "{", "}")
    start = text.index("{", j)
    end = _match(text, start, "{", "}")
    return text[start + 1:end - 1]


class _Func:
    __slots__ = ("name", "public", "args", "results", "span")


def _functions(body):
    """The func.func definitions of a module body: name, visibility, argument
    and result types (pretty or generic form)."""
    funcs = []
    for m in re.finditer(r"func\.func\s+(public\s+|private\s+|nested\s+)?@([\w$.]+|\"[^\"]+\")\s*\(", body):
        f = _Func()
        f.name = m.group(2).strip('"')
        f.public = (m.group(1) or "public").strip() == "public"
        args_end = _match(body, m.end() - 1, "(", ")")
        args = body[m.end():args_end - 1]
        f.args = [_leading_type(a.split(":", 1)[1]) for a in _split_top(args) if ":" in a]
        rest = body[args_end:].lstrip()
        f.results = []
        if rest.startswith("->"):
            rest = rest[2:].lstrip()
            if rest.startswith("("):
                rend = _match(rest, 0, "(", ")")
                f.results = [_leading_type(r) for r in _split_top(rest[1:rend - 1])]
            else:
                f.results = [_leading_type(rest)]
        funcs.append(f)
    for m in re.finditer(r"\"func\.func\"\s*\(\s*\)\s*<\{", body):
        end = _match(body, m.end() - 1, "{", "}")
        props = body[m.end():end - 1]
        f = _Func()
        nm = re.search(r"sym_name\s*=\s*\"([^\"]+)\"", props)
        ft = re.search(r"function_type\s*=\s*\(", props)
        if not nm or not ft:
            raise KernelError("a generic-form func.func needs sym_name and function_type")
        f.name = nm.group(1)
        vis = re.search(r"sym_visibility\s*=\s*\"(\w+)\"", props)
        f.public = not vis or vis.group(1) == "public"
        aend = _match(props, ft.end() - 1, "(", ")")
        f.args = [_leading_type(a) for a in _split_top(props[ft.end():aend - 1])]
        rest = props[aend:].lstrip()[2:].lstrip()  # past '->'
        if rest.startswith("("):
            rend = _match(rest, 0, "(", ")")
            f.results = [_leading_type(r) for r in _split_top(rest[1:rend - 1])]
        else:
            f.results = [_leading_type(_split_top(rest)[0])]
        funcs.append(f)
    return funcs


def _entry_of(funcs, entry, name):
    if not funcs:
        raise KernelError(f"custom kernel '{name}': the text defines no func.func")
    if entry is not None:
        for f in funcs:
            if f.name == entry:
                return f
        raise KernelError(f"custom kernel '{name}': no function @{entry} (defined: "
                          + ", ".join("@" + f.name for f in funcs) + ")")
    public = [f for f in funcs if f.public]
    if len(public) == 1:
        return public[0]
    if len(funcs) == 1:
        return funcs[0]
    for f in funcs:
        if f.name == "main":
            return f
    raise KernelError(f"custom kernel '{name}': several functions and no entry= "
                      "(" + ", ".join("@" + f.name for f in funcs) + ")")


def _scan(text, entry, name, metas):
    """(module body, its functions, the entry function) of a kernel's text.
    metas: the input types the text was made for, named in an error (None:
    a text given as a string)."""
    try:
        body = _module_body(_strip_locations(text))
        funcs = _functions(body)
    except _UnbalancedText as e:
        inputs = f" for inputs {_types_str(metas)}" if metas is not None else ""
        raise KernelError(f"custom kernel '{name}'{inputs}: {e}") from None
    return body, funcs, _entry_of(funcs, entry, name)


def parse_signature(text, entry=None, name="kernel", metas=None):
    """(argument types, result types) of the kernel's entry function, each a
    list of (shape tuple, torch.dtype).  metas: the input types the text was
    made for, named in an error (None: a text given as a string)."""
    _, _, f = _scan(text, entry, name, metas)
    where = f"custom kernel '{name}' @{f.name}"
    return ([_parse_tensor_type(t, where) for t in f.args], [_parse_tensor_type(t, where) for t in f.results])


def _mangle(text, entry, name, metas=None):
    """Module-level text for the engine: locations dropped, every function
    private and renamed tk<hash>_<name>; returns (text, entry symbol,
    argument types, result types)."""
    body, funcs, ef = _scan(text, entry, name, metas)
    where = f"custom kernel '{name}' @{ef.name}"
    args = [_parse_tensor_type(t, where) for t in ef.args]
    results = [_parse_tensor_type(t, where) for t in ef.results]
    if not results:
        raise KernelError(f"{where}: the function has no results")
    tag = "tk" + hashlib.sha1((name + "\0" + body).encode()).hexdigest()[:12] + "_"
    names = {f.name for f in funcs}

    def sym(m):
        bare = m.group(1).strip('"')
        return "@" + _symbol(tag + bare) if bare in names else m.group(0)

    body = re.sub(r"@([\w$.]+|\"[^\"]+\")", sym, body)
    body = re.sub(r"(sym_name\s*=\s*\")([^\"]+)\"",
                  lambda m: m.group(1) + (tag + m.group(2) if m.group(2) in names else m.group(2)) + '"', body)
    # every function private (the program's only public function is @main)
    body = re.sub(r"func\.func\s+(public\s+|nested\s+)?@", "func.func private @", body)
    body = re.sub(r"(sym_visibility\s*=\s*\")public\"", r'\1private"', body)
    out, i = [], 0
    for m in re.finditer(r"\"func\.func\"\s*\(\s*\)\s*<\{", body):
        props = body[m.end():_match(body, m.end() - 1, "{", "}") - 1]
        out.append(body[i:m.end()])
        if not re.search(r"\bsym_visibility\s*=", props):
            out.append('sym_visibility = "private", ')
        i = m.end()
    body = "".join(out) + body[i:]
    return body.strip() + "\n", _symbol(tag + ef.name), args, results


def _symbol(name):
    """A symbol name as MLIR spells it after '@': bare, or quoted."""
    return name if re.fullmatch(r"[A-Za-z_][\w$.]*", name) else '"' + name.replace('"', '\\"') + '"'


# ---- kernels and their variants --------------------------------------------------------------


def _metas(xs):
    # kernels have static shapes: a symbolic size (torch.compile's dynamic
    # shapes) is specialized here (int() guards on its value)
    return tuple((tuple(int(d) for d in x.shape), x.dtype) for x in xs)


def _types_str(metas):
    return "(" + ", ".join(_type_str(s, d) if d in _ELEM_NAME else f"{list(s)} {d}" for s, d in metas) + ")"


class _Variant:
    __slots__ = ("id", "results")


class _Kernel:
    """One custom op's kernels on tpu: a variant per input shape/dtype list,
    each registered with the engine and compiled alone once."""

    def __init__(self, name, text_for, entry=None):
        self.name = name
        self.text_for = text_for  # metas -> text
        self.entry = entry
        self._variants = {}
        self._sigs = {}
        self._texts = {}
        self.nout = None  # the op's result count (set by _define)
        self._lock = threading.Lock()

    def _text(self, metas):
        text = self._texts.get(metas)
        if text is not None:
            return text
        try:
            text = self.text_for(metas)
        except KernelError:
            raise
        except Exception as e:
            raise KernelError(f"custom kernel '{self.name}' for inputs {_types_str(metas)}: "
                              f"making its StableHLO failed: {type(e).__name__}: {e}") from e
        if not isinstance(text, str):
            raise KernelError(f"custom kernel '{self.name}' for inputs {_types_str(metas)}: the text function "
                              f"returned {type(text).__name__}, not str")
        self._texts[metas] = text  # the fake kernel's and the device kernel's (an export runs once)
        return text

    def signature(self, metas):
        """Result (shape, dtype) list for these inputs (no compile)."""
        sig = self._sigs.get(metas)
        if sig is None:
            args, results = parse_signature(self._text(metas), self.entry, self.name, metas)
            self._check_args(metas, args)
            sig = self._sigs[metas] = results
        return sig

    def _check_args(self, metas, args):
        if list(metas) != list(args):
            raise RuntimeError(f"custom kernel '{self.name}': expects inputs {_types_str(args)} "
                               f"but got {_types_str(metas)}")

    def variant(self, metas):
        v = self._variants.get(metas)
        if v is not None:
            return v
        with self._lock:
            v = self._variants.get(metas)
            if v is not None:
                return v
            text, entry, args, results = _mangle(self._text(metas), self.entry, self.name, metas)
            self._check_args(metas, args)
            if self.nout is not None and len(results) != self.nout:
                raise RuntimeError(f"custom kernel '{self.name}' for inputs {_types_str(metas)}: the function has "
                                   f"{len(results)} results, the op declares {self.nout} (num_outputs=)")
            codes = [(_CODE[d], list(s)) for s, d in args]
            rcodes = [(_CODE[d], list(s)) for s, d in results]
            kid = _C.custom_kernel(self.name, text, entry, codes, rcodes)
            _C.custom_kernel_check(kid)  # raises naming the kernel and the types
            v = _Variant()
            v.id = kid
            v.results = results
            self._variants[metas] = v
            self._sigs[metas] = results
            return v

    def run(self, xs):
        from . import _dispatch
        for x in xs:
            if x.device.type != "tpu":
                dev = next(y.device for y in xs if y.device.type == "tpu")
                raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{dev} and {x.device}! (custom kernel '{self.name}')")
        v = self.variant(_metas(xs))
        return _dispatch.run("custom_kernel", list(xs), [v.id])


def _schema(nin, nout):
    args = ", ".join(f"Tensor x{i}" for i in range(nin))
    ret = "Tensor" if nout == 1 else "(" + ", ".join("Tensor" for _ in range(nout)) + ")"
    return f"({args}) -> {ret}"


def _define(name, kernel, nin, nout, reference):
    def _no_cpu(*xs):
        raise NotImplementedError(f"custom op {name} has no CPU kernel (give reference= to add one)")

    def body(*xs):  # the default (CompositeExplicit) kernel is never used: each device has its own
        raise NotImplementedError(f"custom op {name}: no kernel for device {xs[0].device if xs else '?'}")

    op = torch.library.custom_op(name, body, mutates_args=(), schema=_schema(nin, nout))
    kernel.nout = nout

    def tpu_kernel(*xs):
        outs = kernel.run(xs)
        return outs[0] if nout == 1 else tuple(outs)

    def fake(*xs):
        metas = _metas(xs)
        results = kernel.signature(metas)
        if len(results) != nout:
            raise RuntimeError(f"custom kernel '{name}' for inputs {_types_str(metas)}: the function has "
                               f"{len(results)} results, the op declares {nout} (num_outputs=)")
        outs = [xs[0].new_empty(s, dtype=d) for s, d in results]
        return outs[0] if nout == 1 else tuple(outs)

    op.register_kernel("tpu", tpu_kernel)
    op.register_kernel("cpu", reference if reference is not None else _no_cpu)
    op.register_fake(fake)
    op._tpu_kernel = kernel
    return op


def _count_params(fn, what):
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise TypeError(f"{what}: cannot read the function's signature; pass num_inputs=") from None
    if any(p.kind == p.VAR_POSITIONAL for p in ps):
        raise TypeError(f"{what}: the function takes *args; pass num_inputs=")
    return sum(1 for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def stablehlo_op(name, text, *, entry=None, reference=None, num_inputs=None, num_outputs=None):
    """A custom op "ns::name" running a StableHLO kernel on tpu.

    text: the kernel (see the module docstring), or a callable taking the
    inputs as meta tensors and returning the text for their shapes/dtypes.
    entry: the function to call (default: the only public one, or @main).
    reference: an optional CPU implementation (the op's CPU kernel).
    num_inputs / num_outputs: needed only when text is a callable (read
    from the signature otherwise; num_inputs defaults to the callable's
    positional parameters, num_outputs to 1).
    Returns the op (a torch.library CustomOpDef): call it, pass it to
    torch.library.register_autograd, use it under torch.compile."""
    if isinstance(text, str):
        args, results = parse_signature(text, entry, name)
        fixed = text

        def text_for(metas):
            return fixed

        nin = len(args) if num_inputs is None else num_inputs
        nout = len(results) if num_outputs is None else num_outputs
    elif callable(text):
        fn = text

        def text_for(metas):
            return fn(*[torch.empty(s, dtype=d, device="meta") for s, d in metas])

        nin = _count_params(fn, name) if num_inputs is None else num_inputs
        nout = 1 if num_outputs is None else num_outputs
    else:
        raise TypeError(f"stablehlo_op({name!r}): text must be a str or a callable, got {type(text).__name__}")
    if nin < 1:
        raise ValueError(f"stablehlo_op({name!r}): a kernel takes at least one tensor input")
    return _define(name, _Kernel(name, text_for, entry), nin, nout, reference)


# ---- JAX ------------------------------------------------------------------------------------------


def _jax():
    try:
        import jax
        from jax import export
    except ImportError as e:
        raise ImportError("torch_tpu.library.jax_op needs JAX: pip install -r requirements-jax.txt") from e
    return jax, export


def _jax_dtype(dtype):
    import jax.numpy as jnp
    table = {torch.float16: jnp.float16, torch.bfloat16: jnp.bfloat16, torch.float32: jnp.float32,
             torch.float64: jnp.float64, torch.bool: jnp.bool_, torch.int8: jnp.int8, torch.int16: jnp.int16,
             torch.int32: jnp.int32, torch.int64: jnp.int64, torch.uint8: jnp.uint8,
             torch.complex64: jnp.complex64, torch.complex128: jnp.complex128}
    if dtype not in table:
        raise TypeError(f"jax_op: dtype {dtype} has no JAX equivalent here")
    return table[dtype]


def _jax_platform():
    try:
        plat = _C.platform().lower() if _C.initialized() else "cpu"
    except Exception:
        plat = "cpu"
    return "tpu" if "tpu" in plat else "cpu"


def _exporter(name, fn):
    def text_for(metas):
        jax, export = _jax()
        if any(d in (torch.float64, torch.int64, torch.complex128) for _, d in metas) \
                and not jax.config.jax_enable_x64:
            raise KernelError(f"custom kernel '{name}' for inputs {_types_str(metas)}: 64-bit inputs need "
                              "jax.config.update('jax_enable_x64', True)")
        specs = [jax.ShapeDtypeStruct(s, _jax_dtype(d)) for s, d in metas]
        exported = export.export(jax.jit(fn), platforms=[_jax_platform()])(*specs)
        return exported.mlir_module()
    return text_for


def _cpu_via_jax(fn, nout):
    def run(*xs):
        jax, _ = _jax()
        import numpy as np
        args = []
        for x in xs:
            x = x.detach()
            a = x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
            args.append(jax.numpy.asarray(a, dtype=_jax_dtype(x.dtype)))
        outs = jax.jit(fn)(*args)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        res = []
        for o in outs:
            if str(o.dtype) == "bfloat16":
                res.append(torch.from_numpy(np.array(o.astype("float32"))).to(torch.bfloat16))
            else:
                res.append(torch.from_numpy(np.array(o)))
        return res[0] if nout == 1 else tuple(res)
    return run


def jax_op(name, fn, *, vjp=False, reference=None, num_inputs=None, num_outputs=1):
    """A custom op "ns::name" running the JAX function `fn` on tpu: `fn` is
    exported (jax.export, for the platform the engine runs: "tpu" on a TPU,
    "cpu" on the XLA CPU plugin) for each call's shapes and dtypes (cached)
    and its StableHLO spliced into the engine's program.  Pallas kernels
    (`pallas_call`) come the same way: on a TPU they lower to libtpu's
    custom call; here `interpret=True` lowers them to plain StableHLO.
    vjp=True: the backward is JAX's jax.vjp of fn (exported as "ns::name_vjp").
    reference: the op's CPU kernel (default: fn run by JAX on the CPU).
    JAX is imported only when a kernel is first made."""
    nin = _count_params(fn, name) if num_inputs is None else num_inputs
    if nin < 1:
        raise ValueError(f"jax_op({name!r}): a kernel takes at least one tensor input")
    cpu = reference if reference is not None else _cpu_via_jax(fn, num_outputs)
    op = _define(name, _Kernel(name, _exporter(name, fn), entry="main"), nin, num_outputs, cpu)
    if vjp:
        _register_jax_vjp(op, name, fn, nin, num_outputs)
    return op


def _register_jax_vjp(op, name, fn, nin, nout):
    def bwd_fn(*args):
        jax, _ = _jax()
        primals, cts = args[:nin], args[nin:]
        _, pullback = jax.vjp(fn, *primals)
        grads = pullback(cts[0] if nout == 1 else tuple(cts))
        return tuple(grads) if nin > 1 else grads[0]

    bname = name + "_vjp"
    bop = _define(bname, _Kernel(bname, _exporter(bname, bwd_fn), entry="main"), nin + nout, nin,
                  _cpu_via_jax(bwd_fn, nin))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        outs = (output,) if nout == 1 else tuple(output)
        ctx.out_meta = [(o.shape, o.dtype) for o in outs]

    def backward(ctx, *grads):
        xs = ctx.saved_tensors
        cts = [g if g is not None else xs[0].new_zeros(s, dtype=d) for g, (s, d) in zip(grads, ctx.out_meta)]
        gs = bop(*xs, *cts)
        gs = (gs,) if nin == 1 else tuple(gs)
        return tuple(g if x.is_floating_point() or x.is_complex() else None for g, x in zip(gs, xs))

    torch.library.register_autograd(name, backward, setup_context=setup_context)
    op._tpu_vjp = bop
