-- Interoperability with PyTorch (runs where /usr/bin/python3 imports torch,
-- skips saying so elsewhere): a PyTorch-initialised MLP, saved as
-- safetensors by plain Python, trains in ddplua to the same losses as in
-- PyTorch for 5 SGD-momentum steps on the same batches (within 1e-4), and
-- the parameters ddplua saves load back into PyTorch.
local ddp = require "ddplua"
local nn, optim = ddp.nn, ddp.optim

local has_torch = os.execute("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1")

local WRITER = [==[
import json, struct, sys, torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
X = torch.randn(5, 16, 20)
Y = torch.randint(0, 5, (5, 16))
tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
tensors["X"], tensors["Y"] = X, Y
header, blobs, off = {}, [], 0
for name in sorted(tensors):
    t = tensors[name]
    b = t.numpy().tobytes()
    header[name] = {"dtype": {torch.float32: "F32", torch.int64: "I64"}[t.dtype], "shape": list(t.shape),
                    "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
losses = []
for i in range(5):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(X[i]), Y[i])
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(json.dumps(losses))
print(json.dumps({k: v.detach().double().sum().item() for k, v in model.state_dict().items()}))
]==]

local READER = [==[
import json, struct, sys, torch
with open(sys.argv[1], "rb") as f:
    raw = f.read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__", {})
out = {}
for name, info in header.items():
    b, e = info["data_offsets"]
    t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype={"F32": torch.float32}[info["dtype"]])
    out[name] = t.reshape(info["shape"])
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
model.load_state_dict(out)
print(json.dumps({k: v.detach().double().sum().item() for k, v in model.state_dict().items()}))
print(json.dumps(meta))
]==]

local function py(script, file)
  local src = os.tmpname()
  local f = assert(io.open(src, "w"))
  f:write(script)
  f:close()
  local p = io.popen("/usr/bin/python3 " .. src .. " " .. file .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  os.remove(src)
  assert(ok, out)
  return out
end

describe("PyTorch interop", function()
  it("a PyTorch-initialised MLP trains to PyTorch's losses for 5 SGD steps, and goes back to PyTorch", function()
    if not has_torch then
      pending("skipped: /usr/bin/python3 cannot import torch (apt-get install python3-torch)")
      return
    end
    local file = os.tmpname()
    local out = py(WRITER, file)
    local torch_losses = ddp.core.json_decode(out:match("^([^\n]*)"))
    local torch_sums = ddp.core.json_decode(out:match("\n([^\n]*)"))
    local sd = ddp.load(file)
    os.remove(file)

    local model = nn.Sequential { nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5) }
    model:load_state_dict({ ["0.weight"] = sd["0.weight"], ["0.bias"] = sd["0.bias"],
      ["2.weight"] = sd["2.weight"], ["2.bias"] = sd["2.bias"] })
    local opt = optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
    for i = 1, 5 do
      opt:zero_grad()
      local loss = ddp.cross_entropy(model(sd.X[i]), sd.Y[i] + 1) -- PyTorch's labels are 0-based
      loss:backward()
      opt:step()
      assert.is_true(math.abs(loss:item() - torch_losses[i]) < 1e-4,
        string.format("step %d: ddplua %.7f, PyTorch %.7f", i, loss:item(), torch_losses[i]))
    end
    -- the trained parameters agree too
    for name, p in model:named_parameters() do
      local s = p:double():sum():item()
      assert.is_true(math.abs(s - torch_sums[name]) < 1e-3, name)
    end

    -- and ddplua's file loads into PyTorch by name
    local back = os.tmpname()
    ddp.save(model:state_dict(), back, { metadata = { source = "ddplua" } })
    local out2 = py(READER, back)
    os.remove(back)
    local sums = ddp.core.json_decode(out2:match("^([^\n]*)"))
    for name, p in model:named_parameters() do
      assert.is_true(math.abs(p:double():sum():item() - sums[name]) < 1e-6, name)
    end
    assert.are.same({ source = "ddplua" }, ddp.core.json_decode(out2:match("\n([^\n]*)")))
  end)
end)
