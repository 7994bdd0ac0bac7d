-- PyTorch as a reference for the specs: T.run(body, inputs) saves the
-- named tensors of `inputs` to a safetensors file, runs `body` under
-- /usr/bin/python3 with them in the dict T (torch tensors; uint8 masks stay
-- uint8) and reads back what the body put in the dict OUT, as ddplua
-- tensors. The Python side reads and writes safetensors in plain Python
-- (no safetensors package needed). T.available() says whether torch
-- imports; a spec calls pending() when it does not.
--
-- One Python process serves every run of a busted process (torch's import
-- is 1.3-1.6 s, which each run used to pay): the first run starts it,
-- reading its stdout through a pipe; each run writes its inputs and body
-- into a directory of its own, sends that path down a FIFO and reads the
-- server's answer line (a server that died reads as the pipe's end: an
-- error, never a hang). Each body runs in a fresh namespace with torch's
-- seed, default dtype, thread count and grad mode reset, its printed
-- output captured. DDPLUA_TORCH_REF_SERVER=0 runs each body in a Python of
-- its own instead.
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

-- the server: the prelude's definitions, then one request directory a line from the FIFO argv[2]
local SERVER = [==[
import contextlib, io, os, sys, traceback
_base = {}
exec(open(sys.argv[1]).read().split("T = load_st(sys.argv[1])")[0], _base)
torch = _base["torch"]
_seed = torch.initial_seed()
print("ready", flush=True)
for line in open(sys.argv[2]):
    d = line.strip()
    buf, ok = io.StringIO(), True
    torch.manual_seed(_seed); torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1); torch.set_grad_enabled(True)
    g = dict(_base)
    try:
        g["T"], g["OUT"] = _base["load_st"](os.path.join(d, "in.safetensors")), {}
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            exec(compile(open(os.path.join(d, "ref.py")).read(), os.path.join(d, "ref.py"), "exec"), g)
        _base["save_st"](g["OUT"], os.path.join(d, "out.safetensors"))
    except BaseException:
        ok = False
        buf.write(traceback.format_exc())
    with open(os.path.join(d, "output"), "w") as f:
        f.write(buf.getvalue())
    print("ok" if ok else "error", flush=True)
]==]

local server -- {from =, to =, dir =} once started; false where it could not start or died

local function start_server()
  if server ~= nil then return server end
  server = false
  if os.getenv("DDPLUA_TORCH_REF_SERVER") == "0" then return server end
  local dir = U.tmpdir()
  local fifo = dir .. "/requests"
  U.write(dir .. "/prelude.py", PRELUDE)
  U.write(dir .. "/server.py", SERVER)
  if not U.run("mkfifo " .. U.quote(fifo)) then return server end
  local from = io.popen("(unset LD_PRELOAD\nexec " .. U.python .. " " .. U.quote(dir .. "/server.py") .. " " ..
    U.quote(dir .. "/prelude.py") .. " " .. U.quote(fifo) .. " 2> " .. U.quote(dir .. "/log") .. "\n)", "r")
  -- read and write: opening a FIFO so does not wait for the other end (which a server that failed never opens)
  local to = from and io.open(fifo, "r+")
  if not to or from:read("l") ~= "ready" then
    if to then to:close() end
    if from then from:close() end
    return server
  end
  -- at exit: the FIFO's writer closed first (the server then reads its end and exits), then the pipe (whose close
  -- waits for the server); a finalizer set after both files' runs before theirs
  server = setmetatable({ from = from, to = to, dir = dir }, { __gc = function(s)
    s.to:close()
    s.from:close()
  end })
  return server
end

local function run_on_server(s, dir, body)
  U.write(dir .. "/ref.py", body)
  s.to:write(dir .. "\n")
  s.to:flush()
  local status = s.from:read("l")
  if status ~= "ok" and status ~= "error" then
    server = false -- later runs start a Python of their own
    error("PyTorch reference: the server exited\n" .. (U.read(s.dir .. "/log") or ""), 3)
  end
  return status == "ok", U.read(dir .. "/output") or ""
end

function M.available() return U.have_torch() end

--- Runs body with T = inputs; returns OUT (name -> tensor) and the output.
function M.run(body, inputs)
  local dir = U.tmpdir()
  local inp, outp, src = dir .. "/in.safetensors", dir .. "/out.safetensors", dir .. "/ref.py"
  local sd = {}
  for k, v in pairs(inputs or {}) do sd[k] = v:detach():contiguous() end
  if next(sd) == nil then sd.__empty = ddp.zeros(1) end
  ddp.save(sd, inp)
  local s, ok, out = start_server()
  if s then
    ok, out = run_on_server(s, dir, body)
  else
    U.write(src, PRELUDE .. body .. "\nsave_st(OUT, sys.argv[2])\n")
    ok, out = U.run(U.python .. " " .. U.quote(src) .. " " .. U.quote(inp) .. " " .. U.quote(outp))
  end
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
