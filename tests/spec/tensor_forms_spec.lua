-- The functional forms, in-place forms, windows, splits, rotations, products and elementwise helpers of
-- lua/ddplua/tensor_forms.lua against PyTorch on the same values (gradients included), the in-place semantics
-- (views see the change, leaves refused, integer tensors refuse float results, gradients through a graph), the
-- random fills' ranges and moments, and the errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

local function need_torch()
  if not TR.available() then
    pending("skipped: /usr/bin/python3 cannot import torch")
    return false
  end
  return true
end

local function compare(got, ref, tol)
  for k, v in pairs(got) do
    assert(ref[k] ~= nil, "no PyTorch value for " .. k)
    R.assert_close(v, R.from(ref[k]), tol or 1e-6, tol or 1e-6, k)
  end
end

describe("functional forms of the view methods", function()
  it("call the methods", function()
    local x = R.randn({ 2, 3, 4 }, 1)
    R.assert_close(ddp.flatten(x, 2), R.from(x:flatten(2)), 0, 0, "flatten")
    R.assert_close(ddp.reshape(x, { 6, 4 }), R.from(x:reshape({ 6, 4 })), 0, 0, "reshape")
    R.assert_close(ddp.transpose(x, 1, 3), R.from(x:transpose(1, 3)), 0, 0, "transpose")
    R.assert_close(ddp.permute(x, { 3, 1, 2 }), R.from(x:permute({ 3, 1, 2 })), 0, 0, "permute")
    assert.are.same({ 2, 1, 3, 4 }, ddp.unsqueeze(x, 2):size())
    assert.are.same({ 2, 3, 4 }, ddp.squeeze(ddp.unsqueeze(x, 2)):size())
    R.assert_close(ddp.narrow(x, 2, 2, 2), R.from(x:narrow(2, 2, 2)), 0, 0, "narrow")
    R.assert_close(ddp.select(x, 3, 4), R.from(x:select(3, 4)), 0, 0, "select")
    R.assert_close(ddp.t(x[1]), R.from(x[1]:t()), 0, 0, "t")
    R.assert_close(ddp.clone(x), R.from(x), 0, 0, "clone")
    assert.is_false(ddp.detach(x:requires_grad_()).requires_grad)
    assert.is_true(ddp.is_floating_point(x))
    R.assert_error(function() ddp.flatten(3) end, "flatten: expected a tensor, got number")
  end)
end)

describe("in-place forms", function()
  it("match PyTorch's in-place ops and write into the tensor (views see it)", function()
    if not need_torch() then return end
    local x = R.randn({ 4, 5 }, 2):float()
    local p = R.uniform({ 4, 5 }, 0.1, 2, 3):float()
    local m = R.uniform({ 4, 5 }, 0, 1, 4):lt(0.4)
    local function run(fn, t)
      local c = t:clone()
      local view = c:narrow(1, 2, 2)
      local r = fn(c)
      assert(rawequal(r, c) or r:data_ptr() == c:data_ptr(), "returns the tensor itself")
      R.assert_close(view, R.from(c:narrow(1, 2, 2)), 0, 0, "the view sees the change")
      return c
    end
    local got = {
      clamp = run(function(c) return c:clamp_(-0.5, 0.5) end, x),
      clamp_min = run(function(c) return c:clamp_min_(0.1) end, x),
      clamp_max = run(function(c) return c:clamp_max_(0.1) end, x),
      masked_fill = run(function(c) return c:masked_fill_(m, 7) end, x),
      relu = run(function(c) return c:relu_() end, x), sigmoid = run(function(c) return c:sigmoid_() end, x),
      tanh = run(function(c) return c:tanh_() end, x), exp = run(function(c) return c:exp_() end, x),
      log = run(function(c) return c:log_() end, p), sqrt = run(function(c) return c:sqrt_() end, p),
      rsqrt = run(function(c) return c:rsqrt_() end, p), neg = run(function(c) return c:neg_() end, x),
      abs = run(function(c) return c:abs_() end, x), pow = run(function(c) return c:pow_(3) end, x),
      floor = run(function(c) return c:floor_() end, x * 3), round = run(function(c) return c:round_() end, x * 3),
      reciprocal = run(function(c) return c:reciprocal_() end, p), square = run(function(c) return c:square_() end, x),
      lerp = run(function(c) return c:lerp_(p, 0.3) end, x),
      addcmul = run(function(c) return c:addcmul_(x, p, 0.5) end, x),
      tril = run(function(c) return c:tril_(1) end, x), triu = run(function(c) return c:triu_(-1) end, x),
      sin = run(function(c) return c:sin_() end, x), erf = run(function(c) return c:erf_() end, x),
      fd = run(function(c) return c:fill_diagonal_(9) end, x),
      fdw = run(function(c) return c:fill_diagonal_(9, true) end, R.randn({ 9, 3 }, 5):float()),
      fd3 = run(function(c) return c:fill_diagonal_(-2) end, R.randn({ 3, 3, 3 }, 6):float()),
    }
    local ref = TR.run([[
x, p, m = T["x"], T["p"], T["m"].bool()
def c(t): return t.clone()
OUT.update(clamp=c(x).clamp_(-0.5, 0.5), clamp_min=c(x).clamp_min_(0.1), clamp_max=c(x).clamp_max_(0.1),
  masked_fill=c(x).masked_fill_(m, 7), relu=c(x).relu_(), sigmoid=c(x).sigmoid_(), tanh=c(x).tanh_(), exp=c(x).exp_(),
  log=c(p).log_(), sqrt=c(p).sqrt_(), rsqrt=c(p).rsqrt_(), neg=c(x).neg_(), abs=c(x).abs_(), pow=c(x).pow_(3),
  floor=(x * 3).floor_(), round=(x * 3).round_(), reciprocal=c(p).reciprocal_(), square=c(x).square_(),
  lerp=c(x).lerp_(p, 0.3), addcmul=c(x).addcmul_(x, p, value=0.5), tril=c(x).tril_(1), triu=c(x).triu_(-1),
  sin=c(x).sin_(), erf=c(x).erf_(), fd=c(x).fill_diagonal_(9), fdw=c(T["w"]).fill_diagonal_(9, wrap=True),
  fd3=c(T["cube"]).fill_diagonal_(-2))
]], { x = x, p = p, m = m, w = R.randn({ 9, 3 }, 5):float(), cube = R.randn({ 3, 3, 3 }, 6):float() })
    compare(got, ref, 2e-7)
  end)

  it("carry the gradient through a graph, refuse leaves and float results in integer tensors", function()
    if not need_torch() then return end
    local a = R.randn({ 3, 4 }, 7):requires_grad_()
    local b = a * 2
    b:mul_(3)
    b:clamp_(-2, 2)
    b:tanh_()
    b:sum():backward()
    local ref = TR.run([[
a = T["a"].requires_grad_()
b = a * 2
b.mul_(3); b.clamp_(-2, 2); b.tanh_()
b.sum().backward()
OUT["b"], OUT["g"] = b, a.grad
]], { a = a })
    R.assert_close(b, R.from(ref.b), 1e-12, 1e-12, "values")
    R.assert_close(a.grad, R.from(ref.g), 1e-12, 1e-12, "gradient")
    R.assert_error(function() a:exp_() end, "exp_: a leaf tensor that requires grad is being used in an in-place")
    ddp.no_grad(function() a:uniform_(); a:exp_() end) -- allowed without grad mode
    R.assert_error(function() ddp.tensor({ 1, 2 }):exp_() end, "exp_: result type float32 can't be cast to the tensor's dtype int64")
    R.assert_error(function() ddp.zeros(3):addcmul_(ddp.zeros(2, 3), ddp.zeros(2, 3)) end,
      "does not match the tensor's [3]")
  end)

  it("fill at random with the asked range and moments", function()
    ddp.manual_seed(8)
    local u = ddp.zeros(20000):uniform_(-2, 3)
    assert(u:min():item() >= -2 and u:max():item() < 3, "uniform_ range")
    assert(math.abs(u:mean():item() - 0.5) < 0.05, "uniform_ mean")
    local n = ddp.zeros(20000, { dtype = "float64" }):normal_(1, 2)
    assert(math.abs(n:mean():item() - 1) < 0.06 and math.abs(n:std():item() - 2) < 0.06, "normal_ moments")
    local b = ddp.zeros(20000):bernoulli_(0.3)
    assert(math.abs(b:mean():item() - 0.3) < 0.02 and b:eq(0):logical_or(b:eq(1)):all():item() == 1, "bernoulli_")
    local e = ddp.zeros(20000):exponential_(4)
    assert(e:min():item() >= 0 and math.abs(e:mean():item() - 0.25) < 0.01, "exponential_ mean 1/lambd")
    ddp.manual_seed(9)
    local a1 = ddp.zeros(5):normal_()
    ddp.manual_seed(9)
    R.assert_close(ddp.zeros(5):normal_(), R.from(a1), 0, 0, "the global generator's stream")
    R.assert_error(function() ddp.zeros(2):uniform_(3, 1) end, "uniform_: expects from <= to")
    R.assert_error(function() ddp.zeros(2):normal_(0, -1) end, "normal_: std must be >= 0")
    R.assert_error(function() ddp.zeros(2):bernoulli_(2) end, "bernoulli_: p must be in [0, 1]")
    R.assert_error(function() ddp.tensor({ 1 }):uniform_() end, "uniform_: expected a floating-point tensor, got int64")
    R.assert_error(function() ddp.zeros(3):fill_diagonal_(1) end, "at least 2 dimensions")
    R.assert_error(function() ddp.zeros(2, 3, 2):fill_diagonal_(1) end, "all dimensions of the tensor must be equal")
  end)
end)

-- uniform_ / normal_ draw into the tensor itself when it is contiguous and not recorded (a fresh weight's init
-- makes no tensor of its own): the values must be the tensor formula's, rand(size) * (to - from) + from and
-- randn(size) * std + mean, bit for bit, on every kernel set (the float32 uniform kernel is vectorised), for
-- views, for float64 and bfloat16, and the generator must advance alike
describe("uniform_ and normal_ in place", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function()
    it("equal the tensor formula bit for bit, and continue the generator as it does", function()
      local core = ddp.core
      for _, dt in ipairs { "float32", "float64", "bfloat16" } do
        for _, n in ipairs { 0, 1, 15, 16, 31, 33, 64, 1000, 70001 } do
          for _, ab in ipairs { { 0, 1 }, { -0.3, 0.7 }, { 2, 2 }, { -1e30, 1e30 } } do
            local a, b = ab[1], ab[2]
            ddp.manual_seed(n + 7)
            local u = ddp.empty(n, { dtype = dt }):uniform_(a, b)
            local nrm = ddp.empty(n, { dtype = dt }):normal_(a, math.abs(b))
            local after = ddp.rand(3)
            ddp.manual_seed(n + 7)
            local ru = core.rand({ n }, { dtype = dt }) * (b - a) + a
            local rn = core.randn({ n }, { dtype = dt }) * math.abs(b) + a
            local rafter = ddp.rand(3)
            local what = string.format("%s n=%d (%g, %g)", dt, n, a, b)
            assert.are.equal(0, u:ne(ru):sum():item(), "uniform_ " .. what)
            assert.are.equal(0, nrm:ne(rn):sum():item(), "normal_ " .. what)
            assert.are.equal(0, after:ne(rafter):sum():item(), "the generator after " .. what)
          end
        end
      end
    end)
    it("the float32 uniform kernel equals the float64 draws cut to 24 bits, at every length", function()
      for _, n in ipairs { 1, 7, 16, 17, 63, 64, 65, 4097, 100003 } do
        ddp.manual_seed(40 + n)
        ddp.rand(n % 5) -- an offset that does not start a vector step
        local f = ddp.rand(n)
        ddp.manual_seed(40 + n)
        ddp.rand(n % 5)
        local d = (ddp.rand(n, { dtype = "float64" }) * 16777216):floor() / 16777216
        assert.are.equal(0, f:double():ne(d):sum():item(), "n = " .. n)
      end
    end)
  end)

  it("fill a non-contiguous view through the tensor formula, touching nothing else", function()
    ddp.manual_seed(3)
    local base = ddp.zeros(6, 8)
    local view = base:narrow(2, 2, 5)
    view:uniform_(-1, 1)
    ddp.manual_seed(3)
    local want = ddp.rand(6, 5) * 2 - 1
    assert.are.equal(0, view:ne(want):sum():item())
    assert.are.equal(0, base:narrow(2, 1, 1):abs():sum():item() + base:narrow(2, 7, 2):abs():sum():item())
  end)

  it("count as an in-place write for autograd, and keep its rules", function()
    local w = ddp.randn(4, 3):requires_grad_()
    local y = w:sigmoid() -- saves its output
    local out = y * 1
    ddp.no_grad(function() y:uniform_() end)
    R.assert_error(function() out:sum():backward() y:sum():backward() end, "was modified by an in-place operation (version 1, expected 0)")
    R.assert_error(function() w:uniform_() end, "uniform_: a leaf tensor that requires grad is being used in an in-place")
    R.assert_error(function() w:normal_() end, "normal_: a leaf tensor that requires grad is being used in an in-place")
    ddp.no_grad(function() w:normal_(0, 0.02) end)
    assert.is_true(w.requires_grad and w.is_leaf)
    assert.is_true(w:std():item() < 0.1)
  end)
end)

describe("windows, splits, rotations, products and elementwise helpers", function()
  it("match PyTorch, gradients included", function()
    if not need_torch() then return end
    local x = R.randn({ 3, 7, 4 }, 10):requires_grad_()
    local a, b = R.randn({ 2, 3 }, 11):requires_grad_(), R.randn({ 4, 3 }, 12):requires_grad_()
    local c, d = R.randn({ 2, 3, 4 }, 13):requires_grad_(), R.randn({ 3, 4, 5 }, 14):requires_grad_()
    local v1, v2, mv = R.randn({ 3 }, 15), R.randn({ 4 }, 16), R.randn({ 4, 3 }, 17)
    local s = ddp.tensor({ 1, -1, 0 / 0, -0.0, 0.0, math.huge, -math.huge, 2.5 }, { dtype = "float64" })
    local t2 = ddp.tensor({ 0 / 0, 2, 0 / 0, -3, 1, 0, 4, -1 }, { dtype = "float64" })
    local e = R.uniform({ 50 }, -0.999, 0.999, 18)
    local outs = {
      unf = x:unfold(2, 3, 2), unf1 = x:unfold(3, 4, 1), unf0 = x:unfold(1, 1, 5),
      rot1 = x:rot90(), rot2 = x:rot90(2, { 2, 3 }), rot3 = x:rot90(-1, { 3, 1 }), lr = x:fliplr(), ud = x:flipud(),
      kron = ddp.kron(a, b), kron3 = ddp.kron(c, a), inner = ddp.inner(a, b), td = ddp.tensordot(c, d),
      td1 = ddp.tensordot(c, d, { { 2 }, { 1 } }), td0 = ddp.tensordot(a, b, 0), vdot = ddp.vdot(v1, v1),
      addmv = ddp.addmv(v2, mv, v1, { beta = 0.5, alpha = 2 }), addr = ddp.addr(mv, v2, v1, { alpha = -1 }),
      sinc = ddp.sinc(x), cps = ddp.copysign(x, -1), cpt = ddp.copysign(s, ddp.tensor({ -1, 1, 1, -0.0, 1, -2, 3, -1 },
        { dtype = "float64" })), fmax = ddp.fmax(s, t2), fmin = ddp.fmin(s, t2),
      erfinv = ddp.erfinv(e), erfinv32 = e:float():erfinv(),
    }
    local masks = { xor = ddp.logical_xor(s, t2):long(), ninf = s:isneginf():long(), pinf = s:isposinf():long(),
      sb = s:narrow(1, 4, 5):signbit():long() }
    local total = 0
    for k, o in pairs(outs) do
      if o.requires_grad then total = total + (o * R.randn(o:size(), 20)):sum() end
      outs[k] = o:detach()
    end
    total:backward()
    local grads = { gx = x.grad, ga = a.grad, gb = b.grad, gc = c.grad, gd = d.grad }
    local ref2 = TR.run([[
x, a, b, c, d = (T[k].requires_grad_() for k in ("x", "a", "b", "c", "d"))
v1, v2, mv, s, t2, e = T["v1"], T["v2"], T["mv"], T["s"], T["t2"], T["e"]
outs = dict(unf=x.unfold(1, 3, 2), unf1=x.unfold(2, 4, 1), unf0=x.unfold(0, 1, 5), rot1=x.rot90(),
  rot2=x.rot90(2, [1, 2]), rot3=x.rot90(-1, [2, 0]), lr=x.fliplr(), ud=x.flipud(), kron=torch.kron(a, b),
  kron3=torch.kron(c, a), inner=torch.inner(a, b), td=torch.tensordot(c, d), td1=torch.tensordot(c, d, ([1], [0])),
  td0=torch.tensordot(a, b, 0), vdot=torch.vdot(v1, v1), addmv=torch.addmv(v2, mv, v1, beta=0.5, alpha=2),
  addr=torch.addr(mv, v2, v1, alpha=-1), sinc=torch.sinc(x), cps=torch.copysign(x, -1),
  cpt=torch.copysign(s, torch.tensor([-1, 1, 1, -0.0, 1, -2, 3, -1], dtype=torch.float64)), fmax=torch.fmax(s, t2),
  fmin=torch.fmin(s, t2), erfinv=torch.erfinv(e), erfinv32=e.float().erfinv())
total = 0
for k in sorted(outs):
    o = outs[k]
    if o.requires_grad:
        total = total + (o * T["w_" + k]).sum()
    OUT[k] = o.detach()
total.backward()
OUT.update(gx=x.grad, ga=a.grad, gb=b.grad, gc=c.grad, gd=d.grad)
OUT.update(xor=torch.logical_xor(s, t2).long(), ninf=s.isneginf().long(), pinf=s.isposinf().long(),
  sb=s[3:8].signbit().long())
]], (function()
      local inputs = { x = x, a = a, b = b, c = c, d = d, v1 = v1, v2 = v2, mv = mv, s = s, t2 = t2, e = e }
      for k, o in pairs(outs) do inputs["w_" .. k] = R.randn(o:size(), 20) end
      return inputs
    end)())
    for k, o in pairs(outs) do
      local tol = (k == "erfinv32") and 3e-7 or 1e-12
      R.assert_close(o, R.from(ref2[k]), tol, tol, k)
    end
    for k, g in pairs(grads) do R.assert_close(g, R.from(ref2[k]), 1e-10, 1e-10, k) end
    compare(masks, ref2, 0)
  end)

  it("split as PyTorch's tensor_split, hsplit, vsplit and dsplit", function()
    if not need_torch() then return end
    local x = R.randn({ 7, 6, 4 }, 30)
    local function cat_parts(...)
      local p = table.pack(...)
      local sizes = {}
      for k = 1, p.n do sizes[k] = p[k]:size(1) end
      return ddp.tensor(sizes)
    end
    local got = {
      s3 = cat_parts(ddp.tensor_split(x, 3)), s5 = cat_parts(ddp.tensor_split(x, 5)),
      si = cat_parts(ddp.tensor_split(x, { 2, 5 })), sneg = cat_parts(ddp.tensor_split(x, { -2, 9, 1 })),
      h = ddp.cat({ ddp.hsplit(x, 3) }, 1), v = ddp.cat({ ddp.vsplit(x, { 3 }) }, 1), d = ddp.cat({ ddp.dsplit(x, 2) }, 1),
    }
    local ref = TR.run([[
x = T["x"]
sz = lambda ps: torch.tensor([p.shape[0] for p in ps])
OUT.update(s3=sz(torch.tensor_split(x, 3)), s5=sz(torch.tensor_split(x, 5)), si=sz(torch.tensor_split(x, [2, 5])),
  sneg=sz(torch.tensor_split(x, [-2, 9, 1])), h=torch.cat(torch.hsplit(x, 3), 0), v=torch.cat(torch.vsplit(x, [3]), 0),
  d=torch.cat(torch.dsplit(x, 2), 0))
]], { x = x })
    compare(got, ref, 0)
  end)

  it("has finite-difference gradients: unfold, kron, tensordot, sinc, erfinv", function()
    gc.assert_gradcheck(function(t) return t:unfold(1, 2, 2) end, { gc.smooth_input({ 5, 2 }, 40) })
    gc.assert_gradcheck(function(p, q) return ddp.kron(p, q) end, { gc.smooth_input({ 2, 2 }, 41), gc.smooth_input({ 3 }, 42) })
    gc.assert_gradcheck(function(p, q) return ddp.tensordot(p, q, 1) end,
      { gc.smooth_input({ 2, 3 }, 43), gc.smooth_input({ 3, 2 }, 44) })
    gc.assert_gradcheck(function(t) return t:sinc() end, { gc.smooth_input({ 6 }, 45) })
    gc.assert_gradcheck(function(t) return (t * 0.5):erfinv() end, { gc.smooth_input({ 6 }, 46) })
  end)

  it("names the argument and what was expected on bad input", function()
    local x = ddp.zeros(3, 4)
    R.assert_error(function() x:unfold(2, 5, 1) end, "unfold: size 5 is larger than dim 2's 4")
    R.assert_error(function() x:unfold(2, 2, 0) end, "unfold: step must be a positive integer")
    R.assert_error(function() ddp.tensor_split(x, 0) end, "number of sections must be a positive integer")
    R.assert_error(function() ddp.tensor_split(x, "a") end, "expected a number of sections or a table")
    R.assert_error(function() ddp.hsplit(x, 3) end, "hsplit: dim 2 of size 4 does not split into 3 equal parts")
    R.assert_error(function() ddp.dsplit(x, 2) end, "dsplit: expected at least a 3-dimensional tensor")
    R.assert_error(function() x:rot90(1, { 1, 1 }) end, "rot90: the two dims must differ")
    R.assert_error(function() ddp.zeros(3):rot90() end, "rot90: expected at least a 2-dimensional tensor")
    R.assert_error(function() ddp.inner(x, ddp.zeros(3)) end, "inner: the last dims must match")
    R.assert_error(function() ddp.tensordot(x, x, 3) end, "tensordot: dims 3 is out of range")
    R.assert_error(function() ddp.tensordot(x, x, { { 1 }, { 2 } }) end, "tensordot: dim 1 of [3, 4] and dim 2 of [3, 4] differ")
    R.assert_error(function() ddp.addmv(ddp.zeros(3), x, ddp.zeros(4), { gamma = 1 }) end, "unknown option 'gamma'")
    R.assert_error(function() ddp.tensor({ 1 }):erfinv() end, "erfinv: expected a floating-point tensor")
  end)
end)

describe("ported PyTorch code", function()
  -- pytorch/examples imagenet/main.py's accuracy(output, target, topk), line for line
  local function accuracy(output, target, topk)
    return ddp.no_grad(function()
      local maxk = math.max(table.unpack(topk))
      local batch_size = target:size(1)
      local _, pred = output:topk(maxk, 2, true, true)
      pred = pred:t()
      local correct = pred:eq(target:view(1, -1):expand_as(pred))
      local res = {}
      for _, k in ipairs(topk) do
        local correct_k = correct:narrow(1, 1, k):reshape(-1):float():sum(1, true)
        res[#res + 1] = correct_k:mul_(100.0 / batch_size)
      end
      return res
    end)
  end

  it("imagenet's accuracy(output, target, topk=(1, 5)) gives PyTorch's figures", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local out = R.randn({ 64, 100 }, 50):float()
    local target = R.uniform({ 64 }, 1, 101, 51):long()
    target:narrow(1, 1, 16):copy_(out:narrow(1, 1, 16):argmax(2)) -- some right at top-1
    local acc = accuracy(out, target, { 1, 5 })
    local ref = TR.run([[
output, target = T["out"], T["target"] - 1
_, pred = output.topk(5, 1, True, True)
pred = pred.t()
correct = pred.eq(target.view(1, -1).expand_as(pred))
OUT["a1"] = correct[:1].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / 64)
OUT["a5"] = correct[:5].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / 64)
]], { out = out, target = target })
    R.assert_close(acc[1], R.from(ref.a1), 0, 0, "top-1")
    R.assert_close(acc[2], R.from(ref.a5), 0, 0, "top-5")
  end)

  it("DCGAN's weights_init: normal_ and fill_ through the parameters' detached views", function()
    ddp.manual_seed(4)
    local conv = ddp.nn.Conv2d(3, 16, 4)
    local bn = ddp.nn.BatchNorm2d(16)
    ddp.no_grad(function()
      conv.weight:normal_(0.0, 0.02)
      bn.weight:detach():normal_(1.0, 0.02)
      bn.bias:detach():fill_(0)
    end)
    local w = conv.weight
    assert(math.abs(w:mean():item()) < 0.005 and math.abs(w:std():item() - 0.02) < 0.003, "conv weight ~ N(0, 0.02)")
    assert(math.abs(bn.weight:mean():item() - 1) < 0.02, "the detached view wrote into the parameter")
    assert.are.equal(0, bn.bias:abs():sum():item())
    assert.is_true(conv.weight.requires_grad)
  end)
end)
