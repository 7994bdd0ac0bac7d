"""PyTorch's side of the differential suite: computes every case of a batch in one process.

    python3 torch_ref.py cases.json inputs.safetensors results.json results.safetensors

cases.json (written by tests/diff/run.lua) lists the cases: op entry, torch expression, arguments (numbers
encoded as {"$i": "..."} / {"$f": "..."} so that integers stay integers and NaN / inf survive JSON), and inputs
(a base tensor in inputs.safetensors, the view ops that give its layout, whether it requires grad). For each case
the expression runs; outputs and, after backward of sum(out[0] * w) with w_i = ((7 i) mod 11 - 5) / 4, the base
tensors' gradients are written to results.safetensors, and results.json says per case what came out or which
error was raised. safetensors is read and written with struct + json (no extra package).

    python3 torch_ref.py --conditioning cases.json inputs.safetensors positions.json cond.json cond.safetensors

measures, for the cases at the given positions (1-based, of ops whose result may be ill-conditioned), how far
PyTorch's float64 result moves when every float element the op reads and the backward's weights move by one unit in the last place
of their dtype (3 random perturbations): per output and gradient element, the largest deviation from the unperturbed
float64 run. A result within a few times that deviation is as right as floating point allows (run.lua rechecks a
mismatch of such an op with it).
"""
import json
import struct
import sys

import warnings

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
warnings.simplefilter("ignore")  # mse_loss broadcasting warns; the comparison is what counts

ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}
DT = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "uint8": torch.uint8}
DT_NAMES = {v: k for k, v in DT.items()}
DT_NAMES[torch.bool] = "bool"


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = ST_DTYPES[info["dtype"]]
        buf = bytearray(raw[8 + n + b:8 + n + e])
        t = torch.frombuffer(buf, dtype=dt) if len(buf) else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def decode(v):
    if isinstance(v, dict):
        if "$i" in v:
            return int(v["$i"])
        if "$f" in v:
            return float(v["$f"])
        return {k: decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


class Args(dict):
    """A['key'] as in the expressions; absent keys (nil on the Lua side) read as None."""

    def __getitem__(self, k):
        return dict.get(self, k)


# ---- the helpers the expressions use (the Lua side defines the same) ----
def D(d):
    """A Lua dimension (1-based, or negative from the end) as PyTorch's."""
    return d - 1 if d > 0 else d


def ix1(r):
    """(values, indices) with 1-based indices, as ddplua returns them."""
    return (r.values, r.indices + 1)


def cls(t, ig):
    """1-based class targets as PyTorch's 0-based ones; ddplua's ignore_index (compared with the 1-based target)
    becomes -100, which the calls pass as PyTorch's ignore_index."""
    return torch.where(t == ig, torch.full_like(t, -100), t - 1)


def bn(x, rm, rv, w, b, A):
    y = F.batch_norm(x, rm, rv, w, b, A["training"], A["momentum"], A["eps"])
    return (y, rm, rv)


def setitem(t, i, v):
    t[i - 1] = v
    return t


def optim_steps(p, g, A):
    """len(g) steps of torch.optim.<A['opt']> on a copy of p with the gradients g[i]."""
    q = p.detach().clone().requires_grad_(True)
    hp = dict(A["hp"])
    if "betas" in hp:
        hp["betas"] = tuple(hp["betas"])
    opt = getattr(torch.optim, A["opt"])([q], **hp)
    for i in range(g.shape[0]):
        q.grad = g[i].clone()
        opt.step()
    return q.detach()


def apply_layout(t, ops):
    for op in ops:
        if op[0] == "t":
            t = t.transpose(op[1] - 1, op[2] - 1)
        elif op[0] == "permute":
            t = t.permute([d - 1 for d in op[1:]])
        elif op[0] == "narrow":
            t = t.narrow(op[1] - 1, op[2] - 1, op[3])
        elif op[0] == "expand":
            t = t.expand(op[1:])
    return t


def weights(out):
    n = out.numel()
    i = torch.arange(n, dtype=torch.int64)
    w = ((i * 7) % 11 - 5).to(torch.float64) / 4
    return w.reshape(out.shape).to(out.dtype)


def as_list(r):
    if isinstance(r, (tuple, list)):
        return list(r)
    return [r]


def evaluate(c, inputs, compiled, cast64, contiguous=False, perturb=None):
    """Runs case c; returns (outs, leaves) or raises. cast64: float32 inputs as float64 (the reference that tells
    which side of a float32 disagreement is the more accurate); contiguous: every input made contiguous after its
    layout (the same values: tells a PyTorch bug with a layout from a difference of the op); perturb: a function
    applied to each float input as the op sees it (after the layout)."""
    expr = c["torch"]
    if expr not in compiled:
        compiled[expr] = compile(expr, "<%s>" % c["op"], "eval")
    env = {"torch": torch, "F": F, "A": Args(decode(c["args"])), "D": D, "ix1": ix1, "cls": cls, "bn": bn,
           "setitem": setitem, "optim_steps": optim_steps, "DT": DT}
    leaves = {}
    for inp in c["inputs"]:
        t = inputs[inp["key"]].clone()
        if cast64 and t.dtype == torch.float32:
            t = t.double()
        if inp["requires_grad"] and c["grad"]:
            t.requires_grad_(True)
            leaves[inp["name"]] = t
        v = apply_layout(t, inp["layout"])
        if perturb is not None and v.is_floating_point():
            # each element the op sees moves on its own (an expanded input too: its copies are separate inputs)
            v = perturb(v, inp["dtype"])
        env[inp["name"]] = v.contiguous() if contiguous else v
    outs = [o if isinstance(o, torch.Tensor) else torch.tensor(o) for o in as_list(eval(compiled[expr], env))]
    return outs, leaves


def message(e):
    return "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def record(r, prefix, outs, leaves, grad, tensors):
    """Stores outputs (bool as uint8) and, after backward, the leaves' gradients under keys starting with prefix."""
    r["outs"] = []
    for k, o in enumerate(outs):
        key = "%s_out%d" % (prefix, k)
        r["outs"].append({"key": key, "dtype": DT_NAMES.get(o.dtype, str(o.dtype)), "shape": list(o.shape)})
        tensors[key] = o.detach().to(torch.uint8) if o.dtype == torch.bool else o.detach()
    if grad and leaves and outs and outs[0].requires_grad:
        try:
            (outs[0] * weights(outs[0])).sum().backward()
            r["grads"] = {}
            for name, leaf in leaves.items():
                if leaf.grad is None:
                    r["grads"][name] = None
                else:
                    key = "%s_grad_%s" % (prefix, name)
                    r["grads"][name] = key
                    tensors[key] = leaf.grad
        except Exception as e:
            r["grad_error"] = message(e)


def refc(r, c, inputs, compiled, tensors, cid):
    """The same case on contiguous inputs (r["refc"]), to recognise PyTorch's own layout bugs."""
    try:
        outs, leaves = evaluate(c, inputs, compiled, False, contiguous=True)
        r["refc"] = {"status": "ok"}
        record(r["refc"], "c%d_rc" % cid, outs, leaves, c["grad"], tensors)
    except Exception as e:
        r["refc"] = {"status": "error", "error": message(e)}


ULP = {"float32": 2.0 ** -23, "float64": 2.0 ** -52}


def run_float64(c, inputs, compiled, perturb=None, wperturb=None):
    """Outputs and gradients (float64) of case c with its float inputs in float64, optionally perturbed."""
    outs, leaves = evaluate(c, inputs, compiled, True, perturb=perturb)
    grads = {}
    if c["grad"] and leaves and outs and outs[0].requires_grad:
        w = weights(outs[0]).double()
        if wperturb is not None:
            w = wperturb(w)
        (outs[0].double() * w).sum().backward()
        grads = {n: l.grad.detach() for n, l in leaves.items() if l.grad is not None}
    return [o.detach() for o in outs], grads


def deviation(a, b):
    """|a - b| elementwise, 0 where both agree on a non-finite value, inf where only one is finite."""
    if not (a.is_floating_point() and b.is_floating_point()) or a.shape != b.shape:
        return None
    d = (a - b).abs()
    same = (a == b) | (a.isnan() & b.isnan())
    return torch.where(same, torch.zeros_like(d), torch.nan_to_num(d, nan=float("inf")))


def conditioning(cases_path, inputs_path, positions_path, res_json, res_st):
    with open(cases_path) as f:
        cases = json.load(f)["cases"]
    with open(positions_path) as f:
        positions = json.load(f)["positions"]
    inputs = read_safetensors(inputs_path)
    results, tensors, compiled = {}, {}, {}
    for pos in positions:
        c = cases[pos - 1]
        r = {}
        try:
            outs0, grads0 = run_float64(c, inputs, compiled)
            gen = torch.Generator().manual_seed(c["id"])
            dev_o, dev_g = [None] * len(outs0), {}
            wulp = max([ULP.get(i["dtype"], 0.0) for i in c["inputs"]] + [0.0])
            for _ in range(3):
                def perturb(t, dtype):
                    sign = torch.randint(0, 2, t.shape, generator=gen).to(t.dtype) * 2 - 1
                    return t * (1 + ULP.get(dtype, 0.0) * sign)

                def wperturb(w):
                    sign = torch.randint(0, 2, w.shape, generator=gen).to(w.dtype) * 2 - 1
                    return w * (1 + wulp * sign)

                outs, grads = run_float64(c, inputs, compiled, perturb, wperturb)
                for k, (a, b) in enumerate(zip(outs, outs0)):
                    d = deviation(a.double() if a.is_floating_point() else a, b.double() if b.is_floating_point() else b)
                    if d is not None:
                        dev_o[k] = d if dev_o[k] is None else torch.maximum(dev_o[k], d)
                for n, g in grads.items():
                    if n in grads0:
                        d = deviation(g, grads0[n])
                        if d is not None:
                            dev_g[n] = d if n not in dev_g else torch.maximum(dev_g[n], d)
            r["outs"] = []
            for k, d in enumerate(dev_o):
                key = "c%d_dev_out%d" % (pos, k) if d is not None else None
                if key:
                    tensors[key] = d
                r["outs"].append(key)
            r["grads"] = {}
            for n, d in dev_g.items():
                key = "c%d_dev_grad_%s" % (pos, n)
                tensors[key] = d
                r["grads"][n] = key
        except Exception as e:
            r["error"] = message(e)
        results[str(pos)] = r
    write_safetensors(res_st, tensors)
    with open(res_json, "w") as f:
        json.dump({"results": results}, f)


def main():
    if sys.argv[1] == "--conditioning":
        return conditioning(*sys.argv[2:7])
    cases_path, inputs_path, res_json, res_st = sys.argv[1:5]
    with open(cases_path) as f:
        cases = json.load(f)["cases"]
    inputs = read_safetensors(inputs_path)
    results, tensors, compiled = [], {}, {}
    for c in cases:
        cid = c["id"]
        r = {"id": cid}
        laid_out = any(inp["layout"] for inp in c["inputs"])
        try:
            outs, leaves = evaluate(c, inputs, compiled, False)
        except Exception as e:  # the op refused: ddplua must refuse too
            r["status"] = "error"
            r["error"] = message(e)
            if laid_out:
                refc(r, c, inputs, compiled, tensors, cid)
            results.append(r)
            continue
        r["status"] = "ok"
        record(r, "c%d" % cid, outs, leaves, c["grad"], tensors)
        if any(inp["dtype"] == "float32" for inp in c["inputs"]):
            try:
                outs64, leaves64 = evaluate(c, inputs, compiled, True)
                r["ref64"] = {}
                record(r["ref64"], "c%d_r64" % cid, outs64, leaves64, c["grad"], tensors)
            except Exception:
                r.pop("ref64", None)
        if laid_out:
            refc(r, c, inputs, compiled, tensors, cid)
        results.append(r)
    write_safetensors(res_st, tensors)
    with open(res_json, "w") as f:
        json.dump({"results": results}, f)


if __name__ == "__main__":
    main()
