-- ddp.autocast("bfloat16") on CPU tensors (src/ops/autocast.c), as
-- PyTorch's CPU autocast: matmul, linear and conv2d compute in bfloat16
-- (float32 accumulation) from float32 inputs; softmax, log_softmax,
-- cross_entropy, mse_loss, layer_norm and batch_norm compute bfloat16
-- inputs in float32 (issue 13: LayerNorm / BatchNorm after a Linear no
-- longer refuse the bfloat16 input, cross_entropy keeps its loss and
-- log-sum-exp in float32); float32 master weights get float32 gradients.
-- References: float64 from the same bfloat16-rounded values.
local ddp = require "ddplua"
local R = require "helpers.ref"
local nn = ddp.nn

local BF16_EPS = 2 ^ -8 -- half a bfloat16 ulp, relative

local function core_has_onednn() return ddp.core.onednn_info():match("^oneDNN %d") ~= nil end

local function bf(t) return t:to("bfloat16"):double() end -- the value autocast computes with

-- |got - want| <= tol * (|want| + floor), elementwise, got any float dtype
local function within(got, want, tol, floor, what)
  local g, w = R.from(got:double()), R.from(want)
  for i = 1, #w.v do
    local e = math.abs(g.v[i] - w.v[i])
    assert(e <= tol * (math.abs(w.v[i]) + floor),
      string.format("%s: element %d is %.9g, expected %.9g (%.2f x the bfloat16 rounding)", what, i, g.v[i], w.v[i],
        e / (BF16_EPS * (math.abs(w.v[i]) + floor))))
  end
end

-- Runs a Lua chunk in a fresh lua5.4 (with env set) using this process's module paths.
local function fresh(chunk, env) return require("helpers.io_util").run_lua_fresh(chunk, env) end

describe("autocast bfloat16 on the cpu", function()
  it("runs linear, matmul and conv2d in bfloat16 from float32 operands", function()
    ddp.manual_seed(1)
    local x, w, b = ddp.randn(6, 40), ddp.randn(12, 40), ddp.randn(12)
    local img, k, kb = ddp.randn(2, 3, 9, 9), ddp.randn(5, 3, 3, 3), ddp.randn(5)
    local y, mm, cv
    do
      local _ <close> = ddp.autocast("bfloat16")
      y, mm, cv = ddp.linear(x, w, b), x:matmul(w:transpose(1, 2)), ddp.conv2d(img, k, kb, 1, 1)
    end
    assert.equal("bfloat16", y:dtype())
    assert.equal("bfloat16", mm:dtype())
    assert.equal("bfloat16", cv:dtype())
    -- float32 accumulation of the bfloat16 operands, rounded once to bfloat16
    local ref = bf(x):matmul(bf(w):transpose(1, 2))
    within(mm, ref, BF16_EPS * 1.01, 1e-6, "matmul")
    within(y, ref + bf(b), BF16_EPS * 1.01, 1e-6, "linear") -- the bias in the float32 accumulator: one rounding
    -- 3 input channels: on AVX512-BF16 without AMX (and without native bfloat16) computed in float32 and rounded
    -- (the next spec); elsewhere in bfloat16, as linear: the bias after the rounded product
    local cref = ddp.conv2d(bf(img), bf(k), bf(kb), 1, 1)
    local c32 = ddp.conv2d(img, k, kb, 1, 1):to("bfloat16"):double()
    if (cv:double() - c32):abs():max():item() ~= 0 then within(cv, cref, 2 * BF16_EPS, 1, "conv2d") end
  end)

  it("gives float32 master weights float32 gradients", function()
    ddp.manual_seed(2)
    local lin, conv = nn.Linear(10, 4), nn.Conv2d(2, 3, 3)
    local x, img = ddp.randn(5, 10), ddp.randn(2, 2, 6, 6)
    do
      local _ <close> = ddp.autocast("bfloat16")
      local total = lin(x):float():sum() + conv(img):float():sum()
      total:backward()
    end
    for _, p in ipairs({ lin.weight, lin.bias, conv.weight, conv.bias }) do
      assert.equal("float32", p:dtype())
      assert.equal("float32", p.grad:dtype())
    end
    -- d sum(x W^T + b) / dW = column sums of x, within bfloat16 rounding of x
    within(lin.weight.grad, bf(x):sum(1):unsqueeze(1):expand(4, 10), 2 * BF16_EPS, 1e-2, "linear weight gradient")
  end)

  it("normalises and softmaxes a bfloat16 input in float32 (LayerNorm, BatchNorm after a Linear)", function()
    ddp.manual_seed(3)
    local model = nn.Sequential { nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 6) }
    local bn = nn.BatchNorm1d(6)
    local x = ddp.randn(10, 8)
    local h, z, sm, lsm
    do
      local _ <close> = ddp.autocast("bfloat16")
      h = model(x)             -- the last Linear's output: bfloat16
      z = bn(h)                -- float32 statistics, float32 weights
      sm, lsm = ddp.softmax(h, 2), ddp.log_softmax(h, 2)
    end
    assert.equal("bfloat16", h:dtype())
    for _, t in ipairs({ z, sm, lsm }) do assert.equal("float32", t:dtype()) end
    R.assert_close(sm, R.from(ddp.softmax(h:double(), 2)), 1e-6, 1e-5, "softmax of the bfloat16 values")
    R.assert_close(lsm, R.from(ddp.log_softmax(h:double(), 2)), 1e-6, 1e-5, "log_softmax")
    z:sum():backward()
    assert.equal("float32", bn.weight.grad:dtype())
    assert.equal("float32", model[1].weight.grad:dtype())
  end)

  it("keeps cross_entropy's loss and log-sum-exp in float32: the gradient within bfloat16's rounding", function()
    ddp.manual_seed(4)
    local logits = (ddp.randn(64, 50) * 3):to("bfloat16"):requires_grad_()
    local t = (ddp.rand(64) * 50):long() + 1
    local loss
    do
      local _ <close> = ddp.autocast("bfloat16")
      loss = nn.F.cross_entropy(logits, t)
    end
    assert.equal("float32", loss:dtype())
    loss:backward()
    assert.equal("bfloat16", logits.grad:dtype()) -- the input's dtype, rounded once
    local ref = logits:detach():double():requires_grad_()
    local rl = nn.F.cross_entropy(ref, t)
    rl:backward()
    assert.near(rl:item(), loss:item(), 1e-6 * math.abs(rl:item()))
    within(logits.grad, ref.grad, BF16_EPS * 1.01, 1e-7, "cross_entropy gradient")
  end)

  it("trains an MLP to the float32 model's loss", function()
    local function train(autocast)
      ddp.manual_seed(5)
      local model = nn.Sequential { nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4) }
      local opt = ddp.optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
      local x = ddp.randn(128, 16)
      local y = x:narrow(2, 1, 4):argmax(2) -- learnable: the largest of the first 4 features
      local last
      for _ = 1, 60 do
        opt:zero_grad()
        local loss
        if autocast then
          local _ <close> = ddp.autocast("bfloat16")
          loss = nn.F.cross_entropy(model(x), y)
        else
          loss = nn.F.cross_entropy(model(x), y)
        end
        loss:backward()
        opt:step()
        last = loss:item()
      end
      return last
    end
    local f32, b16 = train(false), train(true)
    assert(f32 < 0.5, "float32 did not learn: " .. f32)
    assert(math.abs(b16 - f32) < 0.05, string.format("bfloat16 autocast loss %.4f vs float32 %.4f", b16, f32))
  end)

  it("runs bfloat16 GEMMs through oneDNN where the CPU has native bfloat16 (forced here), as the widened path", function()
    local ok, out = fresh([[
local ddp = require "ddplua"
local core = ddp.core
ddp.manual_seed(6)
local x, w, b = ddp.randn(33, 70), ddp.randn(20, 70), ddp.randn(20)
local function run()
  local xx, ww = x:clone():requires_grad_(), w:clone():requires_grad_()
  local y
  do
    local _ <close> = ddp.autocast("bfloat16")
    y = ddp.linear(xx, ww, b)
  end
  y:float():sum():backward()
  return y:double(), xx.grad, ww.grad
end
local c0 = core._onednn_calls()
local a = { run() }
local used = core._onednn_calls() - c0
core.set_onednn(false)
local r = { run() }
local worst = 0
for i = 1, 3 do
  local d = ((a[i] - r[i]):abs() / (r[i]:abs() + 1)):max():item()
  worst = math.max(worst, d)
end
print("calls", used, "worst", worst, core.onednn_info())
]], "DDPLUA_DNNL_BF16=1")
    assert(ok, out)
    local used, worst = out:match("calls%s+(%d+)%s+worst%s+(%S+)")
    assert(used, out)
    if core_has_onednn() then assert(tonumber(used) >= 3, out) else assert.equal(0, tonumber(used), out) end
    assert(tonumber(worst) <= 2 * BF16_EPS, out) -- one bfloat16 rounding apart at most
  end)

  -- oneDNN's own threads are held at one; a process with spare cores splits a large bfloat16 GEMM over its pool
  -- (rows, or columns when C is wider than tall; uneven parts too), each part its own matmul
  it("splits a large bfloat16 GEMM over the pool's threads: the same values as one thread, within a rounding", function()
    local ok, out = fresh([[
local ddp = require "ddplua"
local core = ddp.core
ddp.manual_seed(7)
local shapes = { { 200, 96, 512 }, { 64, 330, 512 }, { 256, 64, 512 } } -- rows x out x in: uneven rows, columns, even
local function run(threads, x, w, b)
  ddp.set_num_threads(threads)
  local xx, ww = x:clone():requires_grad_(), w:clone():requires_grad_()
  local c0 = core._onednn_calls()
  local y
  do
    local _ <close> = ddp.autocast("bfloat16")
    y = ddp.linear(xx, ww, b)
  end
  (y:float() * y:float()):sum():backward()
  return { y:double(), xx.grad:double(), ww.grad:double() }, core._onednn_calls() - c0
end
for _, s in ipairs(shapes) do
  local m, n, k = s[1], s[2], s[3]
  local x, w, b = ddp.randn(m, k), ddp.randn(n, k) / 20, ddp.randn(n)
  local one, calls1 = run(1, x, w, b)
  local two, calls2 = run(2, x, w, b)
  local ref = x:to("bfloat16"):double():matmul(w:to("bfloat16"):double():t()) + b:to("bfloat16"):double()
  local worst = 0
  for i = 1, 3 do
    worst = math.max(worst, ((one[i] - two[i]):abs() / (one[i]:abs() + 1)):max():item())
  end
  local fwd = ((two[1] - ref):abs() / (ref:abs() + 1)):max():item()
  print(string.format("shape %dx%dx%d calls %d %d worst %.6g fwd %.6g", m, n, k, calls1, calls2, worst, fwd))
end
print(core.onednn_info())
]], "DDPLUA_DNNL_BF16=1")
    assert(ok, out)
    local n = 0
    for m, nn_, k, c1, c2, worst, fwd in out:gmatch("shape (%d+)x(%d+)x(%d+) calls (%d+) (%d+) worst (%S+) fwd (%S+)") do
      n = n + 1
      local what = m .. "x" .. nn_ .. "x" .. k .. ": " .. out
      if core_has_onednn() then
        assert.equal(3, tonumber(c1), what) -- forward, dX, dW on one thread
        assert(tonumber(c2) >= 5, what)     -- at least two of them split in two parts
      end
      assert(tonumber(worst) <= 2 * BF16_EPS, what)
      assert(tonumber(fwd) <= 2 * BF16_EPS, what)
    end
    assert.equal(3, n, out)
  end)

  it("splits batched, transposed and broadcast bfloat16 matmuls too, within a rounding of float64", function()
    local ok, out = fresh([[
local ddp = require "ddplua"
local core = ddp.core
ddp.manual_seed(3)
ddp.set_num_threads(2)
local function bf(...) return ddp.randn(...):to("bfloat16") end
local ab, bb, w = bf(3, 200, 300), bf(3, 300, 64), bf(300, 64)
local cases = {
  { "rows", function() return ab, bb end },
  { "columns", function() return bf(3, 64, 300), bf(3, 300, 200) end },
  { "A^T view", function() return bf(3, 300, 200):transpose(2, 3), bb end },
  { "B^T view", function() return ab, bf(3, 64, 300):transpose(2, 3) end },
  { "broadcast B", function() return ab, w end },
}
for _, c in ipairs(cases) do
  local a, b = c[2]()
  local c0 = core._onednn_calls()
  local got = a:matmul(b)
  local calls = core._onednn_calls() - c0
  local ref = a:double():matmul(b:double())
  print(string.format("case %s calls %d err %.6g", c[1]:gsub(" ", "_"), calls,
    ((got:double() - ref):abs():max() / ref:abs():max()):item()))
end
]], "DDPLUA_DNNL_BF16=1")
    assert(ok, out)
    local seen = 0
    for what, calls, err in out:gmatch("case (%S+) calls (%d+) err (%S+)") do
      seen = seen + 1
      if core_has_onednn() then assert.equal(2, tonumber(calls), what .. ": " .. out) end -- one product, two parts
      assert(tonumber(err) <= 2 * BF16_EPS, what .. ": " .. out)
    end
    assert.equal(5, seen, out)
  end)

  -- bfloat16 convolutions in bfloat16 through oneDNN where the CPU has it natively (forced here): forward and both
  -- backwards, float32 accumulation, the weight gradient's chunks summed in float32; checked against float64 from
  -- the same bfloat16 values, with batches that split unevenly over the threads, strides, no bias, few channels
  it("computes conv2d in bfloat16 through oneDNN (native bfloat16 forced), within a rounding of float64", function()
    local ok, out = fresh([[
local ddp = require "ddplua"
local F, core = ddp.nn.F, ddp.core
ddp.set_num_threads(2)
ddp.manual_seed(8)
-- n, in, out, size, stride, padding, bias, the calls in bfloat16 (a single input channel: the forward only; its
-- weight gradient by im2col + GEMM, the input's by GEMM + col2im, both in bfloat16 too)
local cases = { { 5, 16, 32, 9, 1, 1, true, 2 }, { 4, 32, 16, 8, 2, 0, false, 2 }, { 3, 3, 16, 10, 1, 1, true, 2 },
  { 4, 1, 16, 12, 1, 1, true, 1 } }
for _, c in ipairs(cases) do
  local n, cin, cout, h, stride, pad, bias, want = table.unpack(c)
  local x, w = ddp.randn(n, cin, h, h), ddp.randn(cout, cin, 3, 3) / 4
  local b = bias and ddp.randn(cout) or nil
  local xx, ww, bb = x:clone():requires_grad_(), w:clone():requires_grad_(), b and b:clone():requires_grad_()
  local c0 = core._onednn_bf16_conv_calls()
  local y
  do
    local _ <close> = ddp.autocast("bfloat16")
    y = F.conv2d(xx, ww, bb, stride, pad)
  end
  local r = ddp.randn(y:size(1), y:size(2), y:size(3), y:size(4))
  local loss = (y:float() * r):sum()
  loss:backward()
  local calls = core._onednn_bf16_conv_calls() - c0
  local function bf(t) return t:to("bfloat16"):double() end
  local xr, wr = bf(x):requires_grad_(), bf(w):requires_grad_()
  local br = b and bf(b):requires_grad_() or nil
  local yr = F.conv2d(xr, wr, br, stride, pad)
  local loss_r = (yr * bf(r)):sum()
  loss_r:backward()
  local function err(got, want) return ((got:double() - want):abs():max() / want:abs():max()):item() end
  print(string.format("case %dx%d->%d calls %d want %d y %.3g gx %.3g gw %.3g gb %.3g", n, cin, cout, calls, want,
    err(y, yr),
    err(xx.grad, xr.grad), err(ww.grad, wr.grad), b and err(bb.grad, br.grad) or 0))
end
print(core.onednn_info())
]], "DDPLUA_DNNL_BF16=1 DDPLUA_CONV_BF16=1")
    assert(ok, out)
    local seen = 0
    for what, calls, want, y, gx, gw, gb in
      out:gmatch("case (%S+) calls (%d+) want (%d+) y (%S+) gx (%S+) gw (%S+) gb (%S+)") do
      seen = seen + 1
      -- the forward and the backward (both gradients, or the weights' when few channels leave the input's to col2im)
      if core_has_onednn() then assert.equal(tonumber(want), tonumber(calls), what .. ": " .. out) end
      for name, e in pairs({ y = y, gx = gx, gw = gw, gb = gb }) do
        assert(tonumber(e) <= 2 * BF16_EPS, what .. " " .. name .. ": " .. out)
      end
    end
    assert.equal(4, seen, out)
  end)

  -- Where oneDNN's bfloat16 convolution measured slower than float32 (AVX512-BF16 without AMX: outputs of under 4
  -- positions; src/backends/cpu/cpu_dnnl.c dp_dnnl_conv2d_bf16_pays), autocast
  -- computes the convolution in float32 (a bfloat16 input widened, the float32 weights as they are) and rounds the
  -- output to bfloat16: bit for bit the float32 convolution rounded. DDPLUA_CONV_BF16=0 declines every shape, =1 none;
  -- unset, the rule above on such a CPU, every shape bfloat16 with AMX, none without native bfloat16.
  it("computes in float32 the convolutions bfloat16 does not pay for, rounding the output once", function()
    local chunk = [[
local ddp = require "ddplua"
local F, core = ddp.nn.F, ddp.core
ddp.manual_seed(10)
-- name, x (bfloat16: the output of an earlier autocast layer; or float32), w, stride, padding
local cases = {
  { "1 channel 7x7 / 2", ddp.randn(4, 1, 16, 16), ddp.randn(8, 1, 7, 7) / 7, 2, 3 },
  { "1x1 kernel / 2", ddp.randn(4, 16, 8, 8):to("bfloat16"), ddp.randn(32, 16, 1, 1) / 4, 2, 0 },
  { "1x1 output", ddp.randn(4, 32, 1, 1):to("bfloat16"), ddp.randn(32, 32, 3, 3) / 16, 1, 1 },
  { "1x3 output", ddp.randn(4, 8, 2, 7):to("bfloat16"), ddp.randn(8, 8, 2, 3) / 8, 2, 0 },
  { "16 channels 8x8", ddp.randn(4, 16, 8, 8):to("bfloat16"), ddp.randn(16, 16, 3, 3) / 12, 1, 1 },
}
for _, c in ipairs(cases) do
  local name, x, w, stride, pad = table.unpack(c)
  local xx, ww = x:clone():requires_grad_(), w:clone():requires_grad_()
  local c0 = core._onednn_bf16_conv_calls()
  local y
  do
    local _ <close> = ddp.autocast("bfloat16")
    y = F.conv2d(xx, ww, nil, stride, pad)
  end
  local g = ddp.randn(y:size(1), y:size(2), y:size(3), y:size(4)):to("bfloat16")
  y:backward(g)
  local calls = core._onednn_bf16_conv_calls() - c0
  -- the float32 reference: the widened input, the float32 weights, the output rounded
  local xf, wf = x:float():requires_grad_(), w:clone():requires_grad_()
  local yf = F.conv2d(xf, wf, nil, stride, pad)
  yf:backward(g:float())
  local same = y:dtype() == "bfloat16" and (y:float() - yf:to("bfloat16"):float()):abs():max():item() == 0
  local gsame = ww.grad:dtype() == "float32" and (ww.grad - wf.grad):abs():max():item() == 0
  print(string.format("case %s | calls %d | float32 %s %s | x grad %s", name, calls, tostring(same), tostring(gsame),
    xx.grad:dtype()))
end
print("cpu " .. core.cpu_info())
]]
    -- "yes": not a setting; reported once, and the choice is by shape
    for _, mode in ipairs({ "0", "1", "", "yes" }) do
      local ok, out = fresh(chunk, mode ~= "" and ("DDPLUA_CONV_BF16=" .. mode) or "")
      assert(ok, out)
      if mode == "yes" and core_has_onednn() then
        assert(out:find("DDPLUA_CONV_BF16: 'yes' is not 0 or 1; choosing by shape", 1, true), out)
      end
      local cpu = assert(out:match("cpu ([^\n]+)"), out)
      local native = core_has_onednn() and (cpu:find("avx512_bf16", 1, true) or cpu:find("amx_bf16", 1, true))
      local amx = cpu:find("amx_bf16", 1, true)
      local seen = 0
      for name, calls, same, gsame, xdt in out:gmatch("case ([^|]-) | calls (%d+) | float32 (%a+) (%a+) | x grad (%w+)") do
        seen = seen + 1
        local by_shape = name ~= "1x1 output" and name ~= "1x3 output" -- bfloat16 by shape: 4 or more positions
        local bf16 = native and (mode == "1" or ((mode == "" or mode == "yes") and (amx or by_shape)))
        local what = string.format("DDPLUA_CONV_BF16=%s %s: %s", mode, name, out)
        if bf16 then
          assert(tonumber(calls) > 0, what)
        else
          assert.equal("0", calls, what)
          assert.equal("true", same, what) -- the float32 convolution, rounded once
          assert.equal("true", gsame, what) -- the weight gradient straight from float32
        end
        assert.equal(name == "1 channel 7x7 / 2" and "float32" or "bfloat16", xdt, what)
      end
      assert.equal(5, seen, out)
    end
  end)

  -- An autocast conv net's activations reach pooling as bfloat16 (conv -> relu -> max_pool2d); its planes run
  -- the float32 kernels (src/backends/cpu/cpu_conv.c half_pool) and round once, so each result is the float32
  -- op's on the widened values, rounded to bfloat16: bit for bit, gradients too (one rounding of their float32
  -- sums). Before, bfloat16 pooling took the per-element double path (10x slower).
  it("pools bfloat16 planes as float32 rounded once: max and average, forward and backward, NaN, empty", function()
    ddp.manual_seed(9)
    local F = nn.F
    local function same_bits(got, want, what)
      assert.equal("bfloat16", got:dtype(), what)
      local g, w = got:float():reshape(-1), want:to("bfloat16"):float():reshape(-1)
      assert.same(w:size(), g:size())
      for i = 1, w:size(1) do
        local a, b = g[i]:item(), w[i]:item()
        assert(a == b or (a ~= a and b ~= b), string.format("%s: element %d is %.9g, expected %.9g", what, i, a, b))
      end
    end
    local x = ddp.randn(3, 5, 11, 9):to("bfloat16")
    x:reshape(-1)[17] = 0 / 0 -- a NaN wins its max window, as in float32
    for _, c in ipairs({ { 3, 2, 1, false }, { 2, 2, 0, false }, { 3, 1, 1, false }, { 2, 2, 0, true } }) do
      local what = string.format("kernel %d stride %d padding %d ceil %s", c[1], c[2], c[3], tostring(c[4]))
      local xb, xf = x:detach():requires_grad_(), x:float():requires_grad_()
      local yb = F.max_pool2d(xb, c[1], c[2], c[3], 1, c[4])
      local yf = F.max_pool2d(xf, c[1], c[2], c[3], 1, c[4])
      same_bits(yb, yf, "max_pool2d " .. what)
      local g = ddp.randn(yb:size()):to("bfloat16")
      local lb, lf = (yb * g):sum(), (yf * g:float()):sum()
      lb:backward()
      lf:backward()
      same_bits(xb.grad, xf.grad, "max_pool2d gradient " .. what)
      xb, xf = x:detach():requires_grad_(), x:float():requires_grad_()
      local ab = F.avg_pool2d(xb, c[1], c[2], c[3], c[4])
      local af = F.avg_pool2d(xf, c[1], c[2], c[3], c[4])
      same_bits(ab, af, "avg_pool2d " .. what)
      lb, lf = (ab * g):sum(), (af * g:float()):sum()
      lb:backward()
      lf:backward()
      same_bits(xb.grad, xf.grad, "avg_pool2d gradient " .. what)
    end
    local empty = ddp.zeros(0, 2, 4, 4):to("bfloat16")
    for _, y in ipairs({ F.max_pool2d(empty, 2), F.avg_pool2d(empty, 2) }) do
      assert.same({ 0, 2, 2, 2 }, { y:size(1), y:size(2), y:size(3), y:size(4) })
    end
  end)

  -- A bfloat16 activation's dropout (a Linear's output under autocast) runs the float32 kernel on widened chunks:
  -- the elements float32's dropout keeps with the same seed, each within a rounding of x / (1 - p), its gradient
  -- too; before, it took the per-element double path (10x slower).
  it("drops out bfloat16 as float32 does: the same kept elements, values within a rounding", function()
    local F = nn.F
    local x = ddp.randn(7, 1031):to("bfloat16") -- 7217 values: chunks of 512 and a ragged end
    local xb, xf = x:detach():requires_grad_(), x:float():requires_grad_()
    ddp.manual_seed(21)
    local yb = F.dropout(xb, 0.3, true)
    ddp.manual_seed(21)
    local yf = F.dropout(xf, 0.3, true)
    assert.equal("bfloat16", yb:dtype())
    local g = ddp.randn(7, 1031):to("bfloat16")
    local lb, lf = (yb * g):sum(), (yf * g:float()):sum()
    lb:backward()
    lf:backward()
    local kept = 0
    for _, pair in ipairs({ { yb, yf, "output" }, { xb.grad, xf.grad, "gradient" } }) do
      local got, want = pair[1]:float():reshape(-1), pair[2]:reshape(-1)
      for i = 1, want:size(1) do
        local a, b = got[i]:item(), want[i]:item()
        assert((a == 0) == (b == 0), string.format("%s element %d: %g against float32's %g", pair[3], i, a, b))
        assert(math.abs(a - b) <= BF16_EPS * math.abs(b), string.format("%s element %d: %.9g, expected %.9g", pair[3],
          i, a, b))
        if b ~= 0 then kept = kept + 1 end
      end
    end
    local share = kept / (2 * 7 * 1031)
    assert(share > 0.65 and share < 0.75, "kept share " .. share)
  end)
end)
