"""One rank of a distributed test: `python dist_worker.py SCENARIO [args]`
under torchrun's environment (tests/python/dist_util.py launches it).

Every scenario checks its tpu results against two references computed in
the same processes: the same collectives/training on CPU tensors through a
gloo group (the "same script on gloo/CPU"), and a single-process full-batch
computation on CPU from every rank's inputs (each rank can build every
rank's inputs: they come from seeded generators).  A check raises, so a
failing rank exits non-zero with its traceback."""
import json
import os
import sys
import zlib

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def device():
    return torch.device("tpu", LOCAL_RANK)


def report(data):
    out = os.environ.get("TPU_DIST_OUT")
    if out:
        with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
            json.dump(data, f)


_t0 = [None]


def tick(what):
    """Progress with elapsed seconds (in the rank's log, shown on failure)."""
    import time
    now = time.monotonic()
    if _t0[0] is None:
        _t0[0] = now
    print(f"[rank {RANK}] {now - _t0[0]:7.2f}s {what}", flush=True)


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


# ---- inputs ------------------------------------------------------------------------------------

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
WIDE_UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
ALL = FLOATS + INTS + WIDE_UNSIGNED + [torch.bool, torch.complex64]


def make(rank, dtype, shape, salt, near_one=False):
    """The deterministic input of `rank` for one case (on CPU)."""
    g = torch.Generator().manual_seed(seed_of(rank, str(dtype), tuple(shape), salt))
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        x = 1 + 0.25 * x if near_one else x
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    lo, hi = (0, 7) if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else (-5, 6)
    if near_one:
        lo, hi = (1, 3)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


class Slot:
    """A tpu tensor holding `value`, contiguous or a strided view into a
    bigger tpu tensor whose other elements must stay untouched."""

    def __init__(self, value, strided):
        self.strided = strided and value.dim() > 0
        dev = device()
        if self.strided:
            big = torch.zeros(tuple(value.shape) + (2,), dtype=value.dtype)
            big[..., 1] = _filler(value)
            big[..., 0] = value
            self.big = big.to(dev)
            self.t = self.big[..., 0]
            assert not self.t.is_contiguous()
        else:
            self.big = None
            self.t = value.to(dev)

    def value(self):
        if self.strided:
            big = self.big.cpu()
            assert torch.equal(big[..., 1], _filler(big[..., 0])), "a strided collective wrote outside its view"
            return big[..., 0].contiguous()
        return self.t.cpu()


def _filler(v):
    return torch.full(v.shape, 3 if v.dtype != torch.bool else 1, dtype=torch.int64).to(v.dtype)


def same(got, want, what, exact=False):
    """got (from tpu) against want; bitwise when exact (the gloo reference
    runs the very same host reduction), else PyTorch's dtype tolerances."""
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if exact or not (want.dtype.is_floating_point or want.dtype.is_complex):
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: not equal\n got  {got}\n want {want}")
    else:
        torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}")


# ---- process groups --------------------------------------------------------------------------------


def init(backend=None, **kw):
    tick("start")
    torch.tpu.set_device(LOCAL_RANK)
    dist.init_process_group(backend, **kw)
    g = dist.new_group(backend="gloo")
    tick("init")
    return g


# ---- the collectives matrix -------------------------------------------------------------------------

OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "product": dist.ReduceOp.PRODUCT}


GLOO_LACKS = (torch.int16,) + tuple(WIDE_UNSIGNED)  # gloo: "Invalid scalar type"


def gloo_can(dtype, op=None):
    """Whether gloo itself takes this dtype (with this op) (else the gloo
    reference is skipped and only the single-process reference is used)."""
    if dtype in GLOO_LACKS:
        return False
    if dtype == torch.bool:
        return False  # gloo sums bools as bytes; tpu_dist follows NCCL (sum = or)
    return True


def reduce_ref(values, op, dtype):
    """Single-process reference of a reduction over ranks."""
    if dtype == torch.bool:
        stack = torch.stack(values)
        return stack.any(0) if op in ("sum", "max") else stack.all(0)
    if dtype in WIDE_UNSIGNED:
        wide = [v.to(torch.int64) for v in values]  # small values: exact
        return reduce_ref(wide, op, torch.int64).to(dtype)
    stack = torch.stack([v.to(torch.float64 if dtype.is_floating_point else
                              (torch.complex128 if dtype.is_complex else torch.int64)) for v in values])
    if op == "sum":
        r = stack.sum(0)
    elif op == "avg":
        r = stack.sum(0) / len(values)
    elif op == "product":
        r = stack.prod(0)
    elif op == "min":
        r = stack.min(0).values
    else:
        r = stack.max(0).values
    return r.to(dtype)


def reduction_ok(dtype, op):
    if op == "avg":
        return dtype.is_floating_point or dtype.is_complex
    if dtype.is_complex:
        return op in ("sum", "avg")
    return True


class Matrix:
    def __init__(self, gloo):
        self.gloo = gloo
        self.count = 0
        self.k = 0

    def next_async(self):
        self.k += 1
        return self.k % 2 == 0

    def run(self, what, fn_tpu, fn_gloo=None):
        """fn_tpu(async_op) -> list of (got tensor, reference tensor, exact)."""
        a = self.next_async()
        for got, want, exact in fn_tpu(a):
            same(got, want, f"{what} async={a}", exact=exact)
            self.count += 1


def all_reduce_cases(m):
    shapes = [(), (5,), (3, 4)]
    for dtype in ALL:
        for op in OPS:
            if not reduction_ok(dtype, op):
                continue
            for si, shape in enumerate(shapes):
                strided = si == 2
                salt = ("ar", op)
                vals = [make(r, dtype, shape, salt, near_one=op == "product") for r in range(WORLD)]
                ref = reduce_ref(vals, op, dtype)

                def body(a, dtype=dtype, op=op, shape=shape, strided=strided, vals=vals, ref=ref):
                    s = Slot(vals[RANK], strided)
                    w = dist.all_reduce(s.t, op=OPS[op], async_op=a)
                    if a:
                        w.wait()
                    got = s.value()
                    checks = [(got, ref, False)]
                    if gloo_can(dtype, op):
                        c = vals[RANK].clone()
                        dist.all_reduce(c, op=OPS[op], group=m.gloo)
                        checks.append((got, c, True))
                    return checks

                m.run(f"all_reduce {op} {dtype} {shape} strided={strided}", body)


def broadcast_cases(m):
    for dtype in ALL:
        for shape in [(), (4, 3)]:
            for root in range(WORLD):
                vals = [make(r, dtype, shape, ("bc", root)) for r in range(WORLD)]

                def body(a, root=root, vals=vals, shape=shape):
                    s = Slot(vals[RANK], len(shape) > 1)
                    w = dist.broadcast(s.t, src=root, async_op=a)
                    if a:
                        w.wait()
                    c = vals[RANK].clone()
                    if gloo_can(dtype):
                        dist.broadcast(c, src=root, group=m.gloo)
                    else:
                        c = vals[root]
                    return [(s.value(), vals[root], True), (s.value(), c, True)]

                m.run(f"broadcast {dtype} {shape} root={root}", body)


def gather_family_cases(m):
    for dtype in ALL:
        for shape in [(3,), (2, 3)]:
            vals = [make(r, dtype, shape, "ag") for r in range(WORLD)]
            ref_cat = torch.cat([v.reshape(-1) for v in vals]).reshape((WORLD * shape[0],) + shape[1:])

            def ag_list(a, vals=vals, shape=shape, dtype=dtype):
                inp = Slot(vals[RANK], len(shape) > 1)
                outs = [Slot(torch.zeros(shape, dtype=dtype), r == 1) for r in range(WORLD)]
                w = dist.all_gather([o.t for o in outs], inp.t, async_op=a)
                if a:
                    w.wait()
                return [(o.value(), vals[r], True) for r, o in enumerate(outs)]

            def ag_tensor(a, vals=vals, shape=shape, dtype=dtype):
                inp = Slot(vals[RANK], False)
                out = Slot(torch.zeros((WORLD * shape[0],) + shape[1:], dtype=dtype), True)
                w = dist.all_gather_into_tensor(out.t, inp.t, async_op=a)
                if a:
                    w.wait()
                return [(out.value(), ref_cat, True)]

            def gather(a, vals=vals, shape=shape, dtype=dtype):
                checks = []
                for root in range(WORLD):
                    inp = Slot(vals[RANK], len(shape) > 1)
                    outs = [Slot(torch.zeros(shape, dtype=dtype), False) for _ in range(WORLD)] if RANK == root else None
                    w = dist.gather(inp.t, [o.t for o in outs] if outs else None, dst=root, async_op=a)
                    if a:
                        w.wait()
                    if outs:
                        checks += [(o.value(), vals[r], True) for r, o in enumerate(outs)]
                return checks

            def scatter(a, shape=shape, dtype=dtype):
                checks = []
                for root in range(WORLD):
                    chunks = [make(root, dtype, shape, ("sc", r)) for r in range(WORLD)]
                    out = Slot(torch.zeros(shape, dtype=dtype), len(shape) > 1)
                    ins = [Slot(c, False).t for c in chunks] if RANK == root else None
                    w = dist.scatter(out.t, ins, src=root, async_op=a)
                    if a:
                        w.wait()
                    checks.append((out.value(), chunks[RANK], True))
                return checks

            m.run(f"all_gather {dtype} {shape}", ag_list)
            m.run(f"all_gather_into_tensor {dtype} {shape}", ag_tensor)
            m.run(f"gather {dtype} {shape}", gather)
            m.run(f"scatter {dtype} {shape}", scatter)


def reduce_scatter_cases(m):
    for dtype in [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16, torch.uint8,
                  torch.bool, torch.complex64]:
        for op in ("sum", "avg", "max"):
            if not reduction_ok(dtype, op):
                continue
            shape = (2, 3)
            full = [make(r, dtype, (WORLD * 2, 3), ("rs", op)) for r in range(WORLD)]
            ref = reduce_ref(full, op, dtype).reshape(WORLD, 2, 3)[RANK]

            def rs_tensor(a, full=full, ref=ref, op=op, dtype=dtype):
                out = Slot(torch.zeros(shape, dtype=dtype), True)
                inp = Slot(full[RANK], True)
                w = dist.reduce_scatter_tensor(out.t, inp.t, op=OPS[op], async_op=a)
                if a:
                    w.wait()
                checks = [(out.value(), ref, False)]
                if gloo_can(dtype, op):
                    c = torch.zeros(shape, dtype=dtype)
                    dist.reduce_scatter_tensor(c, full[RANK].clone(), op=OPS[op], group=m.gloo)
                    checks.append((out.value(), c, True))
                return checks

            def rs_list(a, full=full, ref=ref, op=op, dtype=dtype):
                out = Slot(torch.zeros(shape, dtype=dtype), False)
                ins = [Slot(x, i == 0) for i, x in enumerate(full[RANK].reshape(WORLD, 2, 3))]
                w = dist.reduce_scatter(out.t, [i.t for i in ins], op=OPS[op], async_op=a)
                if a:
                    w.wait()
                return [(out.value(), ref, False)]

            def reduce(a, full=full, op=op, dtype=dtype):
                checks = []
                for root in range(WORLD):
                    s = Slot(full[RANK], True)
                    w = dist.reduce(s.t, dst=root, op=OPS[op], async_op=a)
                    if a:
                        w.wait()
                    want = reduce_ref(full, op, dtype) if RANK == root else full[RANK]
                    checks.append((s.value(), want, False))
                return checks

            m.run(f"reduce_scatter_tensor {op} {dtype}", rs_tensor)
            m.run(f"reduce_scatter {op} {dtype}", rs_list)
            m.run(f"reduce {op} {dtype}", reduce)


def all_to_all_cases(m):
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint16]:
        # uneven: rank r sends r + j + 1 rows to rank j
        rows = lambda r, j: r + j + 1  # noqa: E731
        data = {(r, j): make(r, dtype, (rows(r, j), 3), ("a2a", j)) for r in range(WORLD) for j in range(WORLD)}
        inp_full = torch.cat([data[(RANK, j)] for j in range(WORLD)])
        want = torch.cat([data[(r, RANK)] for r in range(WORLD)])

        def single(a, dtype=dtype, inp_full=inp_full, want=want, data=data):
            inp = Slot(inp_full, True)
            out = Slot(torch.zeros(want.shape, dtype=dtype), False)
            w = dist.all_to_all_single(out.t, inp.t, output_split_sizes=[rows(r, RANK) for r in range(WORLD)],
                                       input_split_sizes=[rows(RANK, j) for j in range(WORLD)], async_op=a)
            if a:
                w.wait()
            checks = [(out.value(), want, True)]
            if gloo_can(dtype):
                c = torch.zeros(want.shape, dtype=dtype)
                dist.all_to_all_single(c, inp_full.clone(), [rows(r, RANK) for r in range(WORLD)],
                                       [rows(RANK, j) for j in range(WORLD)], group=m.gloo)
                checks.append((out.value(), c, True))
            return checks

        def even(a, dtype=dtype):
            full = [make(r, dtype, (2 * WORLD, 2), "a2a-even") for r in range(WORLD)]
            inp = Slot(full[RANK], False)
            out = Slot(torch.zeros((2 * WORLD, 2), dtype=dtype), True)
            w = dist.all_to_all_single(out.t, inp.t, async_op=a)
            if a:
                w.wait()
            return [(out.value(), torch.cat([full[r][2 * RANK:2 * RANK + 2] for r in range(WORLD)]), True)]

        def lists(a, dtype=dtype, data=data):
            ins = [Slot(data[(RANK, j)], j == 0).t for j in range(WORLD)]
            outs = [Slot(torch.zeros(data[(r, RANK)].shape, dtype=dtype), r == 1) for r in range(WORLD)]
            w = dist.all_to_all([o.t for o in outs], ins, async_op=a)
            if a:
                w.wait()
            return [(o.value(), data[(r, RANK)], True) for r, o in enumerate(outs)]

        m.run(f"all_to_all_single uneven {dtype}", single)
        m.run(f"all_to_all_single even {dtype}", even)
        m.run(f"all_to_all {dtype}", lists)


def p2p_cases(m):
    dev = device()
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool]:
        vals = [make(r, dtype, (3, 2), "p2p") for r in range(WORLD)]
        peer_next, peer_prev = (RANK + 1) % WORLD, (RANK - 1) % WORLD

        def sendrecv(a, vals=vals, dtype=dtype):
            # ring: even ranks send first, odd ranks receive first (blocking)
            out = Slot(torch.zeros((3, 2), dtype=dtype), True)
            src = vals[RANK].to(dev).t().contiguous().t()
            if RANK % 2 == 0:
                dist.send(src, peer_next)
                dist.recv(out.t, peer_prev)
            else:
                dist.recv(out.t, peer_prev)
                dist.send(src, peer_next)
            return [(out.value(), vals[peer_prev], True)]

        def isendirecv(a, vals=vals, dtype=dtype):
            out = Slot(torch.zeros((3, 2), dtype=dtype), False)
            r = dist.irecv(out.t, peer_prev)  # posted before the send: must not block
            s = dist.isend(vals[RANK].to(dev), peer_next)
            s.wait()
            r.wait()
            return [(out.value(), vals[peer_prev], True)]

        def batch(a, vals=vals, dtype=dtype):
            out = Slot(torch.zeros((3, 2), dtype=dtype), True)
            ops = [dist.P2POp(dist.irecv, out.t, peer_prev), dist.P2POp(dist.isend, vals[RANK].to(dev), peer_next)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [(out.value(), vals[peer_prev], True)]

        m.run(f"send/recv {dtype}", sendrecv)
        m.run(f"isend/irecv {dtype}", isendirecv)
        m.run(f"batch_isend_irecv {dtype}", batch)


def coalesced_cases(m):
    dev = device()
    vals = [[make(r, dt, (4,), ("co", i)) for i, dt in enumerate([torch.float32, torch.float32, torch.bfloat16])]
            for r in range(WORLD)]

    def all_reduce_cm(a):
        slots = [Slot(v, i == 1) for i, v in enumerate(vals[RANK])]
        with c10d._coalescing_manager(async_ops=a) as cm:
            for s in slots:
                dist.all_reduce(s.t)
        if a:
            cm.wait()
        return [(s.value(), reduce_ref([vals[r][i] for r in range(WORLD)], "sum", s.t.dtype), False)
                for i, s in enumerate(slots)]

    def all_reduce_cm_device(a):
        slots = [Slot(v, False) for v in vals[RANK]]
        with c10d._coalescing_manager(device=dev, async_ops=a) as cm:
            for s in slots:
                dist.all_reduce(s.t)
        if a:
            cm.wait()
        return [(s.value(), reduce_ref([vals[r][i] for r in range(WORLD)], "sum", s.t.dtype), False)
                for i, s in enumerate(slots)]

    def all_reduce_coalesced(a):
        slots = [Slot(v, i == 0) for i, v in enumerate(vals[RANK][:2])]  # one dtype (PyTorch checks)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = dist.all_reduce_coalesced([s.t for s in slots], async_op=a)
        if a:
            w.wait()
        return [(s.value(), reduce_ref([vals[r][i] for r in range(WORLD)], "sum", s.t.dtype), False)
                for i, s in enumerate(slots)]

    def gather_scatter_cm(a):
        ins = [Slot(v, False) for v in vals[RANK]]
        outs = [Slot(torch.zeros(4 * WORLD, dtype=v.dtype), True) for v in vals[RANK]]
        with c10d._coalescing_manager(async_ops=a) as cm:
            for i, o in zip(ins, outs):
                dist.all_gather_into_tensor(o.t, i.t)
        if a:
            cm.wait()
        checks = [(o.value(), torch.cat([vals[r][i] for r in range(WORLD)]), True) for i, o in enumerate(outs)]
        full = [torch.cat([vals[r][i] for i in range(2)]) for r in range(WORLD)]  # float32 pair
        rs_in = [Slot(torch.cat([full[RANK], full[RANK]]), False), Slot(full[RANK], True)]
        rs_out = [Slot(torch.zeros(8, dtype=torch.float32), False), Slot(torch.zeros(8 // WORLD, dtype=torch.float32), False)]
        with c10d._coalescing_manager(async_ops=a) as cm:
            for o, i in zip(rs_out, rs_in):
                dist.reduce_scatter_tensor(o.t, i.t)
        if a:
            cm.wait()
        r0 = reduce_ref([torch.cat([f, f]) for f in full], "sum", torch.float32).reshape(WORLD, -1)[RANK]
        r1 = reduce_ref(full, "sum", torch.float32).reshape(WORLD, -1)[RANK]
        checks += [(rs_out[0].value(), r0, False), (rs_out[1].value(), r1, False)]
        return checks

    m.run("coalescing_manager all_reduce", all_reduce_cm)
    m.run("coalescing_manager(device) all_reduce", all_reduce_cm_device)
    m.run("all_reduce_coalesced", all_reduce_coalesced)
    m.run("coalescing_manager all_gather_into_tensor / reduce_scatter_tensor", gather_scatter_cm)


def functional_cases(m):
    import torch.distributed._functional_collectives as funcol
    dev = device()
    group = dist.group.WORLD
    for dtype in [torch.float32, torch.bfloat16, torch.int64]:
        vals = [make(r, dtype, (2 * WORLD, 3), "fc") for r in range(WORLD)]

        def body(a, vals=vals, dtype=dtype):
            x = vals[RANK].to(dev)
            ar = funcol.all_reduce(x, "sum", group)
            ag = funcol.all_gather_tensor(x, 0, group)
            rs = funcol.reduce_scatter_tensor(x, "sum", 0, group)
            a2a = funcol.all_to_all_single(x, None, None, group)
            bc = funcol.broadcast(x, 1 % WORLD, group)
            red = reduce_ref(vals, "sum", dtype)
            return [
                (funcol.wait_tensor(ar).cpu(), red, False),
                (funcol.wait_tensor(ag).cpu(), torch.cat(vals), True),
                (funcol.wait_tensor(rs).cpu(), red.reshape(WORLD, 2, 3)[RANK], False),
                (funcol.wait_tensor(a2a).cpu(), torch.cat([v.reshape(WORLD, 2, 3)[RANK] for v in vals]), True),
                (funcol.wait_tensor(bc).cpu(), vals[1 % WORLD], True),
                (x.cpu(), vals[RANK], True),  # functional: the input is untouched
            ]

        m.run(f"functional collectives {dtype}", body)


@scenario
def collectives(*args):
    gloo = init()
    assert dist.get_backend_config() == "tpu:tpu_dist,cpu:gloo", dist.get_backend_config()
    m = Matrix(gloo)
    parts = args or ["all_reduce", "broadcast", "gather_family", "reduce_scatter", "all_to_all", "p2p", "coalesced",
                     "functional"]
    for p in parts:
        globals()[p + "_cases"](m)
    dist.barrier()
    # a cpu tensor in the default group goes to gloo
    c = torch.full((3,), float(RANK + 1))
    dist.all_reduce(c)
    same(c, torch.full((3,), float(sum(range(1, WORLD + 1)))), "cpu all_reduce on the default group")
    report({"checked": m.count, "parts": parts})
    dist.destroy_process_group()


# ---- DDP ------------------------------------------------------------------------------------------

class Net(torch.nn.Module):
    """Two paths: `aux` is used only on even steps (find_unused_parameters)."""

    def __init__(self, d=16, h=32, out=4):
        super().__init__()
        self.l1 = torch.nn.Linear(d, h)
        self.l2 = torch.nn.Linear(h, h)
        self.aux = torch.nn.Linear(h, h)
        self.head = torch.nn.Linear(h, out)

    def forward(self, x, use_aux=True):
        y = torch.relu(self.l1(x))
        y = torch.tanh(self.l2(y))
        if use_aux:
            y = y + 0.5 * self.aux(y)
        return self.head(y)


def batch(step, n, d=16, out=4, salt="ddp"):
    g = torch.Generator().manual_seed(seed_of(salt, step))
    return torch.randn(n, d, generator=g), torch.randint(0, out, (n,), generator=g)


def params_of(model):
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def close_dicts(got, want, what, atol=2e-5, rtol=2e-5):
    assert got.keys() == want.keys(), f"{what}: keys differ"
    for k in want:
        torch.testing.assert_close(got[k].float(), want[k].float(), atol=atol, rtol=rtol,
                                   msg=lambda m, k=k: f"{what}: {k}: {m}")


def ddp_train(dev, group, steps, micro, *, find_unused=False, no_sync=False, bucket_mb=25.0, as_view=False,
              reference=False):
    """Trains Net with DDP (or, reference=True, alone on the full batch) and
    returns the parameters after every step."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = Net().to(dev)
    per = micro // WORLD
    if reference:
        net = model
    else:
        net = DDP(model, device_ids=None, process_group=group, find_unused_parameters=find_unused,
                  bucket_cap_mb=bucket_mb, gradient_as_bucket_view=as_view)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    history = []
    nbuckets = None
    for step in range(steps):
        opt.zero_grad()
        use_aux = not find_unused or step % 2 == 0
        chunks = 2 if no_sync else 1
        for c in range(chunks):
            x, y = batch((step, c), micro)
            if not reference:
                x, y = x[RANK * per:(RANK + 1) * per], y[RANK * per:(RANK + 1) * per]
            x, y = x.to(dev), y.to(dev)
            ctx = net.no_sync() if (no_sync and c == 0 and not reference) else _nullctx()
            with ctx:
                loss = torch.nn.functional.cross_entropy(net(x, use_aux), y)
                loss.backward()
        opt.step()
        history.append(params_of(model))
    if not reference:
        nbuckets = len(net.reducer._get_zeros_like_grad_buckets())
    return history, nbuckets


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@scenario
def ddp():
    gloo = init()
    dev = device()
    variants = [dict(bucket_mb=0.001), dict(find_unused=True), dict(no_sync=True, as_view=True)]
    out = {}
    for v in variants:
        name = ",".join(f"{k}={val}" for k, val in v.items()) or "default"
        tpu, nb = ddp_train(dev, None, 3, 8, **v)
        ref, _ = ddp_train("cpu", None, 3, 8, reference=True, **v)
        gl, _ = ddp_train("cpu", gloo, 3, 8, **v)
        for step, (a, b, c) in enumerate(zip(tpu, ref, gl)):
            close_dicts(a, b, f"DDP {name} step {step} vs single-process CPU")
            close_dicts(a, c, f"DDP {name} step {step} vs DDP on gloo/CPU")
        out[name] = nb
    assert out["bucket_mb=0.001"] > 1, out  # several buckets
    report({"buckets": out})
    dist.destroy_process_group()


# ---- FSDP2, DCP -----------------------------------------------------------------------------------

class Stack(torch.nn.Module):
    def __init__(self, d=64, layers=3, out=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.head = torch.nn.Linear(d, out)

    def forward(self, x):
        for l in self.layers:
            x = torch.tanh(l(x))
        return self.head(x)


def full_params(model):
    out = {}
    for k, v in model.state_dict().items():
        v = v.full_tensor() if hasattr(v, "full_tensor") else v
        out[k] = v.detach().cpu().float().clone()
    return out


def fsdp_train(dev, mesh, steps, *, mp=None, reference=False, d=64, adam=True):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = Stack(d).to(dev)
    if not reference:
        kw = dict(mesh=mesh) if mesh is not None else {}
        if mp is not None:
            kw["mp_policy"] = mp
        for l in model.layers:
            fully_shard(l, **kw)
        fully_shard(model, **kw)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2) if adam else torch.optim.SGD(model.parameters(), lr=0.5)
    hist = []
    n = 4 * WORLD
    for step in range(steps):
        x, y = batch(step, n, d=d, salt="fsdp")
        if not reference:
            per = n // WORLD
            x, y = x[RANK * per:(RANK + 1) * per], y[RANK * per:(RANK + 1) * per]
        loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        hist.append(full_params(model))
    return model, hist


@scenario
def fsdp():
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    gloo = init()
    dev = device()
    mesh = init_device_mesh("tpu", (WORLD,))
    cpu_mesh = init_device_mesh("cpu", (WORLD,))

    # training: fp32 against the single-process CPU run and FSDP2 on gloo/CPU
    model, tpu = fsdp_train(dev, mesh, 3)
    _, ref = fsdp_train("cpu", None, 3, reference=True)
    _, gl = fsdp_train("cpu", cpu_mesh, 3)
    for step in range(3):
        close_dicts(tpu[step], ref[step], f"FSDP2 step {step} vs single-process CPU", atol=1e-5, rtol=1e-4)
        close_dicts(tpu[step], gl[step], f"FSDP2 step {step} vs FSDP2 on gloo/CPU", atol=1e-5, rtol=1e-4)

    tick("fp32")
    # mixed precision: bf16 parameters, fp32 gradient reduction (SGD: Adam's
    # first step is sign(g) * lr, which turns bf16 rounding into lr-sized steps)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    _, tpu_mp = fsdp_train(dev, mesh, 2, mp=mp, adam=False)
    _, gl_mp = fsdp_train("cpu", cpu_mesh, 2, mp=mp, adam=False)
    _, ref_sgd = fsdp_train("cpu", None, 2, reference=True, adam=False)
    for step in range(2):
        close_dicts(tpu_mp[step], gl_mp[step], f"FSDP2 bf16/fp32 step {step} vs gloo/CPU", atol=2e-3, rtol=2e-2)
        close_dicts(tpu_mp[step], ref_sgd[step], f"FSDP2 bf16/fp32 step {step} vs fp32 CPU", atol=1e-2, rtol=5e-2)
    tick("mixed precision")

    # memory: unsharded parameters are freed on reshard (storage resize to 0)
    big = Stack(512, layers=2).to(dev)
    for l in big.layers:
        fully_shard(l, mesh=mesh)
    fully_shard(big, mesh=mesh)
    torch.tpu.synchronize()
    sharded = torch.tpu.memory_allocated(dev)
    for m in [*big.layers, big]:
        m.unshard()
    torch.tpu.synchronize()
    unsharded = torch.tpu.memory_allocated(dev)
    for m in [*big.layers, big]:
        m.reshard()
    torch.tpu.synchronize()
    resharded = torch.tpu.memory_allocated(dev)
    full_bytes = sum(p.numel() * p.element_size() for p in big.parameters())  # DTensor: the global size
    assert unsharded - sharded >= 0.9 * full_bytes * (WORLD - 1) / WORLD, (sharded, unsharded, full_bytes)
    assert resharded <= sharded + 0.05 * full_bytes, (sharded, unsharded, resharded)
    tick("memory")
    # ... and after a forward with reshard_after_forward (the default)
    big(torch.randn(2, 512).to(dev)).sum().backward()
    torch.tpu.synchronize()
    after_step = torch.tpu.memory_allocated(dev)
    grads = sum(p.grad._local_tensor.numel() * 4 for p in big.parameters())
    assert after_step <= sharded + grads + 0.05 * full_bytes, (sharded, after_step, grads)

    # DCP: save the sharded model, load it into a differently initialised one
    ckpt = os.path.join(os.environ["TPU_DIST_OUT"], "ckpt")
    sd = get_model_state_dict(model)
    dcp.save(sd, checkpoint_id=ckpt)
    torch.manual_seed(123)
    other = Stack().to(dev)
    for l in other.layers:
        fully_shard(l, mesh=mesh)
    fully_shard(other, mesh=mesh)
    before = full_params(other)
    assert any(not torch.equal(before[k], tpu[-1][k]) for k in before)
    sd2 = get_model_state_dict(other)
    dcp.load(sd2, checkpoint_id=ckpt)
    set_model_state_dict(other, sd2)
    close_dicts(full_params(other), tpu[-1], "DCP round trip", atol=0, rtol=0)
    tick("dcp")
    report({"mem": [sharded, unsharded, resharded, after_step], "full_bytes": full_bytes})
    dist.destroy_process_group()


# ---- tensor parallel, DTensor, HSDP ----------------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.w1 = torch.nn.Linear(d, h)
        self.w2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


class Block(torch.nn.Module):
    """A transformer block: attention (q, k, v, o) and an MLP, pre-norm."""

    def __init__(self, d=16, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d)
        self.v = torch.nn.Linear(d, d)
        self.o = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.mlp = MLP(d, 4 * d)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.norm1(x)
        split = lambda z: z.view(b, t, -1, z.shape[-1] // (self.heads // 1) if False else 4).transpose(1, 2)  # noqa
        q, k, v = (self.q(h), self.k(h), self.v(h))
        q, k, v = (z.reshape(b, t, -1, 4).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.mlp(self.norm2(x))


def grads_of(model):
    out = {}
    for k, p in model.named_parameters():
        g = p.grad
        g = g.full_tensor() if hasattr(g, "full_tensor") else g
        out[k] = g.detach().cpu().float().clone()
    return out


def tp_check(make, plan, x, mesh, dev, what):
    from torch.distributed.tensor.parallel import parallelize_module
    torch.manual_seed(0)
    ref = make()
    out_ref = ref(x)
    out_ref.sum().backward()
    torch.manual_seed(0)
    model = parallelize_module(make().to(dev), mesh, plan)
    out = model(x.to(dev))
    out = out.full_tensor() if hasattr(out, "full_tensor") else out
    out.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), out_ref.detach(), atol=1e-5, rtol=1e-5,
                               msg=lambda m: f"{what} output: {m}")
    close_dicts(grads_of(model), grads_of(ref), f"{what} gradients", atol=1e-5, rtol=1e-4)


@scenario
def tp_dtensor():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    import torch.distributed.tensor as dt
    init()
    dev = device()
    mesh = init_device_mesh("tpu", (WORLD,))

    # tensor parallel: an MLP and a transformer block, against CPU
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))
    tp_check(MLP, {"w1": ColwiseParallel(), "w2": RowwiseParallel()}, x, mesh, dev, "TP MLP")
    xb = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel(),
            "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel()}
    tp_check(Block, plan, xb, mesh, dev, "TP transformer block")
    tick("tensor parallel")

    # DTensor placements and redistribution, against the same ops on CPU
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(4 * WORLD, 6, generator=g), torch.randn(6, 2 * WORLD, generator=g)
    A = distribute_tensor(a.to(dev), mesh, [Shard(0)])
    B = distribute_tensor(b.to(dev), mesh, [Replicate()])
    checks = {
        "Shard(0) local": (A.to_local().cpu(), a.chunk(WORLD)[RANK]),
        "Shard(0) @ Replicate": ((A @ B).full_tensor().cpu(), a @ b),
        "Shard(0) -> Replicate": (A.redistribute(mesh, [Replicate()]).to_local().cpu(), a),
        "Shard(0) -> Shard(1)": (A.redistribute(mesh, [Shard(1)]).to_local().cpu(), a.chunk(WORLD, 1)[RANK]),
        "Replicate -> Shard(1)": (B.redistribute(mesh, [Shard(1)]).to_local().cpu(), b.chunk(WORLD, 1)[RANK]),
        "elementwise on Shard(0)": ((A * 2 + 1).full_tensor().cpu(), a * 2 + 1),
        "sum of Shard(0)": (A.sum().full_tensor().cpu(), a.sum()),
    }
    # Partial: a sum over the sharded dimension, reduced on redistribute
    C = distribute_tensor(b.to(dev), mesh, [Shard(0)])
    P = A.redistribute(mesh, [Shard(1)]) @ C  # Shard(1) @ Shard(0) -> Partial
    assert isinstance(P.placements[0], Partial), P.placements
    checks["Partial -> Replicate"] = (P.redistribute(mesh, [Replicate()]).to_local().cpu(), a @ b)
    checks["Partial -> Shard(0)"] = (P.redistribute(mesh, [Shard(0)]).to_local().cpu(), (a @ b).chunk(WORLD)[RANK])
    local = torch.full((2, 3), float(RANK + 1))
    Pm = DTensor.from_local(local.to(dev), mesh, [Partial()])
    checks["from_local Partial -> Replicate"] = (Pm.full_tensor().cpu(), torch.full((2, 3), float(sum(range(1, WORLD + 1)))))
    for what, (got, want) in checks.items():
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, w=what: f"DTensor {w}: {m}")
    tick("dtensor")

    # sharded random numbers equal the unsharded ones under the same seed
    # (row shards: DTensor moves each shard's generator offset to its first
    # element; column shards are not contiguous, which DTensor does not model)
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(7)
        sharded = dt.randn(4 * WORLD, 8, device_mesh=mesh, placements=[Shard(0)], dtype=dtype).full_tensor().cpu()
        torch.manual_seed(7)
        full = dt.randn(4 * WORLD, 8, device_mesh=mesh, placements=[Replicate()], dtype=dtype).full_tensor().cpu()
        torch.manual_seed(7)
        single = torch.randn(4 * WORLD, 8, device=dev, dtype=dtype).cpu()
        assert torch.equal(sharded, full), f"sharded randn ({dtype}) differs from the unsharded one"
        assert torch.equal(full, single), f"replicated randn ({dtype}) differs from a plain randn"
        assert full.float().std() > 0.5 and not torch.equal(full[:4], full[4:8])
        # the generators stay in step: the next draw agrees too
        nxt = dt.rand(2 * WORLD, device_mesh=mesh, placements=[Shard(0)]).full_tensor().cpu()
        gathered = [torch.zeros(2 * WORLD) for _ in range(WORLD)]
        dist.all_gather_object(gathered, nxt)
        assert all(torch.equal(g, nxt) for g in gathered)
    tick("rng")
    report({"rng": "ok"})
    dist.destroy_process_group()


@scenario
def hsdp():
    """HSDP on a 2 x (WORLD / 2) mesh: replicate across dim 0, shard across dim 1."""
    from torch.distributed.device_mesh import init_device_mesh
    init()
    dev = device()
    mesh = init_device_mesh("tpu", (2, WORLD // 2), mesh_dim_names=("replicate", "shard"))
    _, tpu = fsdp_train(dev, mesh, 2)
    _, ref = fsdp_train("cpu", None, 2, reference=True)
    for step in range(2):
        close_dicts(tpu[step], ref[step], f"HSDP step {step} vs single-process CPU", atol=1e-5, rtol=1e-4)
    tick("hsdp")
    report({"mesh": list(mesh.shape)})
    dist.destroy_process_group()


def main():
    name, args = sys.argv[1], sys.argv[2:]
    SCENARIOS[name](*args)


if __name__ == "__main__":
    main()
