-- PyTorch as a reference for the specs: T.run(body, inputs) saves the
-- named tensors of `inputs` to a safetensors file, runs `body` under
-- /usr/bin/python3 with them in the dict T (torch tensors; uint8 masks stay
-- uint8) and reads back what the body put in the dict OUT, as ddplua
-- tensors. The Python side reads and writes safetensors in plain Python
-- (no safetensors package needed). T.available() says whether torch
-- imports; a spec calls pending() when it does not.
local ddp = require "ddplua"
local U = require "helpers.io_util"

local M = {}

local PRELUDE = [==[
import json, math, struct, sys, torch
torch.set_num_threads(1)
_DT = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool}
_NAME = {v: k for k, v in _DT.items() if k != "BOOL"}
def load_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, info in header.items():
        b, e = info["data_offsets"]
        dt = _DT[info["dtype"]]
        buf = bytearray(raw[8 + n + b:8 + n + e])
        t = torch.frombuffer(buf, dtype=dt) if len(buf) else torch.empty(0, dtype=dt)
        out[k] = t.reshape(info["shape"]).clone()
    return out
def save_st(d, path):
    header, blobs, off = {}, [], 0
    for k in sorted(d):
        t = d[k]
        if not torch.is_tensor(t): t = torch.tensor(t)
        t = t.detach().contiguous()
        if t.dtype == torch.bool: t = t.to(torch.uint8)
        b = t.numpy().tobytes()
        header[k] = {"dtype": _NAME[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
T = load_st(sys.argv[1])
OUT = {}
]==]

function M.available() return U.have_torch() end

--- Runs body with T = inputs; returns OUT (name -> tensor) and the output.
function M.run(body, inputs)
  local dir = U.tmpdir()
  local inp, outp, src = dir .. "/in.safetensors", dir .. "/out.safetensors", dir .. "/ref.py"
  local sd = {}
  for k, v in pairs(inputs or {}) do sd[k] = v:detach():contiguous() end
  if next(sd) == nil then sd.__empty = ddp.zeros(1) end
  ddp.save(sd, inp)
  U.write(src, PRELUDE .. body .. "\nsave_st(OUT, sys.argv[2])\n")
  local ok, out = U.run(U.python .. " " .. U.quote(src) .. " " .. U.quote(inp) .. " " .. U.quote(outp))
  if not ok then
    U.rm_rf(dir)
    error("PyTorch reference failed:\n" .. out, 2)
  end
  local res = ddp.load(outp)
  local copy = {}
  for k, v in pairs(res) do copy[k] = v end
  U.rm_rf(dir)
  return copy, out
end

return M
