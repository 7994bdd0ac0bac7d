-- nn.ModuleList, nn.ModuleDict, nn.Identity, shared parameters (weight
-- tying) and PyTorch's positional constructor arguments (issue 14). The
-- names a model of ModuleLists, ModuleDicts, a Sequential and a tied weight
-- gives its parameters, buffers, modules and state dict are compared with
-- torch 1.13's for the same structure, and PyTorch's state dict of it,
-- written as safetensors by plain Python, loads and gives PyTorch's
-- outputs and the tied weight's gradient.
local ddp = require "ddplua"
local nn, optim = ddp.nn, ddp.optim
local U = require "helpers.io_util"

local function names_of(iter)
  local out = {}
  for name in iter do out[#out + 1] = name end
  return out
end

local function keys_of(sd)
  local out = {}
  for k in pairs(sd) do out[#out + 1] = k end
  return out
end

local function fails(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
  return err
end

-- the structure both sides build
local Block = nn.Module:extend("Block")
function Block:__init(d)
  self.ln = nn.LayerNorm(d)
  self.attn = nn.Linear(d, d, false)
  self.bn = nn.BatchNorm1d(d)
end
function Block:forward(x) return x + self.attn(self.ln(x)) end

local Net = nn.Module:extend("Net")
function Net:__init()
  self.wte = nn.Embedding(10, 4)
  self.blocks = nn.ModuleList { Block(4), Block(4) }
  self.blocks:insert(2, Block(4))          -- PyTorch's insert(1, ...)
  self.blocks:append(Block(4))
  self.blocks:extend { nn.Identity() }
  self.heads = nn.ModuleDict { { "lm", nn.Linear(4, 10, false) }, { "aux", nn.Linear(4, 2) } }
  self.heads.lm.weight = self.wte.weight   -- weight tying, as nanoGPT's
  self.sorted = nn.ModuleDict { zeta = nn.Linear(2, 2), alpha = nn.Linear(2, 2) }
  self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Identity())
end
function Net:forward(ids)
  local x = self.wte(ids)
  for _, b in ipairs(self.blocks) do x = b(x) end
  x = self.seq(x)
  return self.heads.lm(x), self.heads.aux(x)
end

local TORCH = [==[
import json, struct, sys, torch
import torch.nn as nn
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.ln = nn.LayerNorm(d)
        s.attn = nn.Linear(d, d, bias=False)
        s.bn = nn.BatchNorm1d(d)
    def forward(s, x):
        return x + s.attn(s.ln(x))
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(10, 4)
        s.blocks = nn.ModuleList([Block(4), Block(4)])
        s.blocks.insert(1, Block(4))
        s.blocks.append(Block(4))
        s.blocks.extend([nn.Identity()])
        s.heads = nn.ModuleDict([("lm", nn.Linear(4, 10, bias=False)), ("aux", nn.Linear(4, 2))])
        s.heads["lm"].weight = s.wte.weight
        s.sorted = nn.ModuleDict([("alpha", nn.Linear(2, 2)), ("zeta", nn.Linear(2, 2))])
        s.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Identity())
    def forward(s, ids):
        x = s.wte(ids)
        for b in s.blocks:
            x = b(x)
        x = s.seq(x)
        return s.heads["lm"](x), s.heads["aux"](x)
m = Net()
with torch.no_grad():
    for p in m.parameters():
        p.add_(torch.randn_like(p) * 0.1)  # LayerNorm's ones/zeros become distinct values
ids = torch.tensor([[1, 0, 9], [4, 4, 2]])
lm, aux = m(ids)
(lm.square().sum() + aux.sum()).backward()
sd = m.state_dict()
header, blobs, off = {}, [], 0
for name in sd:
    b = sd[name].detach().contiguous().numpy().tobytes()
    header[name] = {"dtype": {torch.float32: "F32", torch.int64: "I64"}[sd[name].dtype],
                    "shape": list(sd[name].shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print(json.dumps({
    "state_dict": list(sd.keys()),
    "named_parameters": [n for n, _ in m.named_parameters()],
    "named_buffers": [n for n, _ in m.named_buffers()],
    "named_modules": [n for n, _ in m.named_modules()],
    "n_parameters": len(list(m.parameters())),
    "lm": lm.tolist(), "aux": aux.tolist(),
    "tied_grad": m.wte.weight.grad.tolist(),
}))
]==]

local function max_diff(a, b)
  local d = 0
  local function walk(x, y)
    if type(x) == "table" then
      assert.are.equal(#x, #y)
      for i = 1, #x do walk(x[i], y[i]) end
    else
      d = math.max(d, math.abs(x - y))
    end
  end
  walk(a, b)
  return d
end

describe("nn containers", function()
  it("ModuleList: 1-based positions, #, ipairs, append/extend/insert, 0-based names", function()
    local a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Tanh()
    local l = nn.ModuleList { a, b }
    assert.are.equal(2, #l)
    assert.are.equal(a, l[1])
    assert.are.equal(b, l[-1])
    assert.is_nil(l[3]) -- one past the end: where ipairs stops
    local seen = {}
    for i, m in ipairs(l) do seen[i] = m end
    assert.are.same({ a, b }, seen)
    l:insert(1, c)
    assert.are.same({ c, a, b }, { l[1], l[2], l[3] })
    assert.are.same({ "0.weight", "0.bias" }, names_of(nn.ModuleList { a }:named_parameters()))
    assert.are.same({ "1.weight", "1.bias" }, names_of(l:named_parameters())) -- renumbered
    l:insert(-1, nn.Sigmoid()) -- before the last, as PyTorch's insert(-1, m)
    assert.are.equal(b, l[4])
    l[1] = nn.GELU()
    assert.are.equal("GELU", l[1]:_class_name())
    l[#l + 1] = nn.Identity()
    assert.are.equal(5, #l)
    l:extend(nn.ModuleList { nn.ReLU() })
    assert.are.equal(6, #l)
    assert.are.equal(0, #nn.ModuleList())
    -- a subclass is still made with extend(name)
    local Stack = nn.ModuleList:extend("Stack")
    assert.are.equal(2, #Stack { nn.ReLU(), nn.ReLU() })
  end)

  it("ModuleList: bad input is an error naming it", function()
    local l = nn.ModuleList { nn.ReLU() }
    fails("ModuleList: index 3 out of range %(it holds 1 modules", function() return l[3] end)
    fails("ModuleList: index 0 out of range", function() return l[0] end)
    fails("ModuleList: element 2 is a number, expected a module", nn.ModuleList, { nn.ReLU(), 5 })
    fails("ModuleList: expected a list of modules, got a table with key x", nn.ModuleList, { x = nn.ReLU() })
    fails("ModuleList: expected a list of modules, got a single ReLU", nn.ModuleList, nn.ReLU())
    fails("ModuleList:append: expected a module, got a tensor", function() l:append(ddp.zeros(1)) end)
    fails("ModuleList:insert: position 5 out of range %(1%.%.2%)", function() l:insert(5, nn.ReLU()) end)
    fails("ModuleList: element 1 must be a module, got a string", function() l[1] = "relu" end)
    fails("ModuleList has no forward: iterate over it", function() l(ddp.zeros(1)) end)
  end)

  it("ModuleDict: keys in the order given (pairs), sorted from a plain table, and its methods", function()
    local enc, dec = nn.Linear(2, 3), nn.Linear(3, 2)
    local md = nn.ModuleDict { { "enc", enc }, { "dec", dec } }
    assert.are.equal(enc, md.enc)
    assert.are.equal(dec, md["dec"])
    assert.are.equal(2, #md)
    assert.are.same({ "enc", "dec" }, md:keys())
    assert.are.same({ enc, dec }, md:values())
    local order = {}
    for k, m in pairs(md) do order[#order + 1] = { k, m } end
    assert.are.same({ { "enc", enc }, { "dec", dec } }, order)
    assert.are.same({ "enc.weight", "enc.bias", "dec.weight", "dec.bias" }, keys_of(md:state_dict()))
    assert.are.same({ "a", "b", "c" }, nn.ModuleDict { c = nn.ReLU(), a = nn.ReLU(), b = nn.ReLU() }:keys())
    md.mid = nn.ReLU()                  -- assignment appends
    md:update { { "out", nn.Tanh() } }
    assert.are.same({ "enc", "dec", "mid", "out" }, md:keys())
    assert.is_true(md:contains("mid"))
    assert.are.equal("Tanh", md:pop("out"):_class_name())
    md.mid = nil                        -- removes
    assert.are.same({ "enc", "dec" }, md:keys())
    assert.are.equal(2, #md)
    assert.is_false(md:contains("mid"))
    md.mid = nn.ReLU()                  -- and a new assignment appends again
    assert.are.same({ "enc", "dec", "mid" }, md:keys())
    md.mid = nil
    assert.is_nil(md.unknown)
    local copy = nn.ModuleDict(md)      -- another ModuleDict keeps its order
    assert.are.same({ "enc", "dec" }, copy:keys())
    md:clear()
    assert.are.equal(0, #md)
  end)

  it("ModuleDict: bad keys and values are errors naming them", function()
    local md = nn.ModuleDict()
    fails('ModuleDict: key "keys" is the name of a ModuleDict method or field', function() md.keys = nn.ReLU() end)
    fails('ModuleDict: key "training" is the name', function() md:update { training = nn.ReLU() } end)
    fails("ModuleDict: key \"a.b\" must be a non%-empty name without '%.'", function() md["a.b"] = nn.ReLU() end)
    fails('ModuleDict: %["x"%] must be a module, got a number', nn.ModuleDict, { x = 3 })
    fails("ModuleDict: entry 2 must be a {key, module} pair, got a module", nn.ModuleDict,
      { { "a", nn.ReLU() }, nn.ReLU() })
    fails("ModuleDict: keys are strings, got the integer 1", function() md[1] = nn.ReLU() end)
    md.a = nn.ReLU()
    fails("ModuleDict: no key zz %(keys: a%)", function() md:pop("zz") end)
    fails("ModuleDict has no forward", function() md(1) end)
  end)

  it("nn.Identity returns its input and ignores its arguments", function()
    local x = ddp.randn(2, 3)
    assert.are.equal(x, nn.Identity(3, "unused")(x))
    assert.are.same({}, nn.Identity():parameters())
  end)

  it("a tied weight is one parameter: parameters, named_parameters, the optimizer; state_dict has both keys",
    function()
      ddp.manual_seed(0) -- its own weights: a draw with every ReLU dead would give no gradient to check
      local net = Net()
      local names = names_of(net:named_parameters())
      assert.is_nil(table.concat(names, " "):find("heads.lm.weight", 1, true)) -- the first name only
      local count = 0
      for _, p in ipairs(net:parameters()) do if p == net.wte.weight then count = count + 1 end end
      assert.are.equal(1, count)
      local sd = net:state_dict()
      assert.is_not_nil(sd["wte.weight"])
      assert.is_not_nil(sd["heads.lm.weight"])
      local opt = optim.SGD(net:parameters(), { lr = 0.1 }) -- would reject a parameter listed twice
      local lm = net(ddp.tensor({ { 1, 2 } }))
      lm:sum():backward()
      local before = net.wte.weight:clone()
      opt:step()
      assert.are.same(net.wte.weight:totable(), net.heads.lm.weight:totable())
      assert.is_true((before - net.wte.weight):abs():sum():item() > 0)
      -- loading restores both names (one tensor)
      local fresh = Net()
      fresh:load_state_dict(net:state_dict())
      assert.are.same(net.wte.weight:totable(), fresh.heads.lm.weight:totable())
      assert.are.equal(fresh.wte.weight, fresh.heads.lm.weight)
    end)

  it("names everything as torch 1.13 does, and PyTorch's state dict loads and gives its outputs and gradient",
    function()
      if not U.have_torch() then
        pending("/usr/bin/python3 cannot import torch: the names were not compared with PyTorch's")
        return
      end
      local dir = U.tmpdir()
      U.write(dir .. "/net.py", TORCH)
      local ok, out = U.run(U.python .. " " .. U.quote(dir .. "/net.py") .. " " .. U.quote(dir .. "/net.safetensors"))
      assert.is_true(ok, out)
      local torch = ddp.core.json_decode(out:match("[^\n]*{[^\n]*"))
      local net = Net()
      assert.are.same(torch.state_dict, keys_of(net:state_dict()))
      assert.are.same(torch.named_parameters, names_of(net:named_parameters()))
      assert.are.same(torch.named_buffers, names_of(net:named_buffers()))
      assert.are.same(torch.named_modules, names_of(net:named_modules()))
      assert.are.equal(torch.n_parameters, #net:parameters())
      local sd = ddp.load(dir .. "/net.safetensors")
      U.rm_rf(dir)
      net:load_state_dict(sd)
      local lm, aux = net(ddp.tensor({ { 1, 0, 9 }, { 4, 4, 2 } }) + 1) -- ids are 1-based
      assert.is_true(max_diff(torch.lm, lm:totable()) < 1e-5, "lm logits differ from PyTorch's")
      assert.is_true(max_diff(torch.aux, aux:totable()) < 1e-5, "aux logits differ from PyTorch's")
      ; (lm:square():sum() + aux:sum()):backward()
      assert.is_true(max_diff(torch.tied_grad, net.wte.weight.grad:totable()) < 1e-4,
        "the tied weight's gradient (both uses) differs from PyTorch's")
    end)
end)

describe("PyTorch's positional constructor arguments", function()
  local function same_module(a, b)
    assert.are.equal(tostring(a), tostring(b))
    assert.are.same(keys_of(a:state_dict()), keys_of(b:state_dict()))
  end

  it("match the options-table forms", function()
    same_module(nn.Conv2d(1, 32, 3, 2, 1, 1, 1, false), nn.Conv2d(1, 32, 3, { stride = 2, padding = 1, bias = false }))
    same_module(nn.Conv2d(1, 32, 3, 1), nn.Conv2d(1, 32, 3, { stride = 1 }))
    same_module(nn.Conv2d(3, 8, { 3, 5 }, { 1, 2 }), nn.Conv2d(3, 8, { 3, 5 }, { stride = { 1, 2 } }))
    same_module(nn.Conv2d(3, 8, 5, 1, "same"), nn.Conv2d(3, 8, 5, { padding = 2 }))
    same_module(nn.Conv2d(3, 8, 5, 1, "valid"), nn.Conv2d(3, 8, 5))
    same_module(nn.Linear(4, 2, false), nn.Linear(4, 2, { bias = false }))
    -- positional settings, then the rest by name (Python's keywords after its positional arguments)
    same_module(nn.Conv2d(1, 32, 4, 2, 1, { bias = false }), nn.Conv2d(1, 32, 4, { stride = 2, padding = 1, bias = false }))
    same_module(nn.Conv2d(1, 32, 3, 2, { groups = 1, dilation = 2 }), nn.Conv2d(1, 32, 3, 2, 0, 2))
    same_module(nn.BatchNorm2d(4, 1e-3, { affine = false }), nn.BatchNorm2d(4, { eps = 1e-3, affine = false }))
    same_module(nn.LayerNorm(8, 1e-6), nn.LayerNorm(8, { eps = 1e-6 }))
    same_module(nn.LayerNorm(8, 1e-5, false), nn.LayerNorm(8, { elementwise_affine = false }))
    same_module(nn.BatchNorm2d(4, 1e-3, 0.01), nn.BatchNorm2d(4, { eps = 1e-3, momentum = 0.01 }))
    same_module(nn.BatchNorm1d(4, 1e-5, 0.1, false, false), nn.BatchNorm1d(4, { affine = false,
      track_running_stats = false }))
    same_module(nn.SyncBatchNorm(4, 1e-3), nn.SyncBatchNorm(4, { eps = 1e-3 }))
    same_module(nn.Dropout(0.1), nn.Dropout { p = 0.1 })
    same_module(nn.Dropout(0.2, true), nn.Dropout(0.2))
    same_module(nn.ReLU(true), nn.ReLU())
    same_module(nn.GELU("none"), nn.GELU())
    same_module(nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(3, { stride = 2, padding = 1 }))
    same_module(nn.AvgPool2d(2, 2, 0, false, true), nn.AvgPool2d(2))
    same_module(nn.Embedding(10, 4, nil, nil, 2.0, false, false), nn.Embedding(10, 4))
    assert.are.same({ 1, 2 }, nn.Conv2d(1, 32, 3, 1, { 1, 2 }).padding)
    local conv = nn.Conv2d(1, 32, 3, 1)
    same_module(nn.Conv2d(2, 4, 3, 1, "same", 2, 2), nn.Conv2d(2, 4, 3, { padding = 2, dilation = 2, groups = 2 }))
    assert.is_true(nn.MaxPool2d(2, 2, 0, 1, false, true).ceil_mode)
    assert.are.same({ 2, 32, 26, 26 }, conv(ddp.randn(2, 1, 28, 28)):size())
  end)

  it("settings the ops do not have yet are errors saying so; unknown ones list the valid ones", function()
    fails("Conv2d: in_channels 2 and out_channels 3 must both be divisible by groups 2", nn.Conv2d, 2, 3, 3, 1, 0, 2, 2)
    fails("Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got 'wrap'", nn.Conv2d, 1, 2, 3,
      { padding_mode = "wrap" })
    fails('Conv2d: padding="same" needs stride 1 and an even dilation %* %(kernel_size %- 1%)', nn.Conv2d, 1, 2, 4, 1,
      "same")
    fails("Conv2d: padding must be an integer, {h, w}, \"valid\" or \"same\", got \"full\"", nn.Conv2d, 1, 2, 3, 1,
      "full")
    fails("Conv2d: bias must be true or false, got 1", nn.Conv2d, 1, 2, 3, 1, 0, 1, 1, 1)
    fails("Conv2d: too many arguments %(9 after the required ones", nn.Conv2d, 1, 2, 3, 1, 0, 1, 1, true, "zeros",
      "cpu", "float32", 1)
    fails("Conv2d: an options table must come last, after the positional settings %(got it as argument 2",
      nn.Conv2d, 1, 2, 3, 1, { padding = 1 }, 1)
    fails("Conv2d: stride is given twice %(argument 1 and in the options table%)", nn.Conv2d, 1, 2, 3, 1, { stride = 2 })
    fails("Conv2d: unknown option 'strides'", nn.Conv2d, 1, 2, 3, 1, { strides = 2 })
    fails("Linear: bias must be true or false, got yes", nn.Linear, 2, 2, "yes")
    fails("MaxPool2d: ceil_mode must be a boolean, got 1", nn.MaxPool2d, 2, 2, 0, 1, false, 1)
    fails("MaxPool2d: return_indices=true is not supported yet", nn.MaxPool2d, 2, { return_indices = true })
    fails("MaxPool2d: dilation=2 is not supported yet", nn.MaxPool2d, 2, 2, 0, 2)
    fails("AvgPool2d: count_include_pad must be a boolean, got 0", nn.AvgPool2d, 2, 2, 0, false, 0)
    fails("AvgPool2d: divisor_override must be a positive integer, got %-3", nn.AvgPool2d, 2, { divisor_override = -3 })
    fails("Embedding: max_norm=1 is not supported yet", nn.Embedding, 10, 4, nil, 1)
    fails("Embedding: sparse=true is not supported yet", nn.Embedding, 10, 4, { sparse = true })
    fails('GELU: approximate must be "none" or "tanh", got "sigmoid"', nn.GELU, "sigmoid")
    fails("Dropout: probability p must be a number in %[0, 1%], got 2", nn.Dropout, 2)
    fails("BatchNorm2d: unknown option 'epsilon' %(valid options: eps, momentum", nn.BatchNorm2d, 4, { epsilon = 1 })
    fails("ReLU: too many arguments", nn.ReLU, true, true)
  end)
end)
