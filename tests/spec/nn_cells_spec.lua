-- nn.RNNCell / nn.LSTMCell / nn.GRUCell and the 1-d convolutions and pools (nn.Conv1d, nn.ConvTranspose1d,
-- nn.MaxPool1d, nn.AvgPool1d, F.conv1d, F.conv_transpose1d, F.max_pool1d, F.avg_pool1d; nn/cells.lua and
-- nn/conv1d.lua): PyTorch's parameter names, shapes, init bounds and reprs; values and every gradient against
-- PyTorch 1.13 with the same weights (cells unrolled over a few steps, with and without a state, unbatched; odd
-- sizes with stride, padding, dilation and groups); one step of nn.LSTM / nn.GRU / nn.RNN; finite differences in
-- float64; errors naming the module.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, F = ddp.nn, ddp.nn.F

local function close(got, want, tol, what)
  assert(want ~= nil, what .. ": no reference value")
  assert(got ~= nil, what .. ": no value")
  R.assert_close(got, R.from(want), tol, tol, what)
end

local function leaf(shape, seed, dt)
  return R.randn(shape, seed):to(dt or "float64"):clone():requires_grad_()
end

local function param_names(m)
  local names = {}
  for name in m:named_parameters() do names[#names + 1] = name end
  return names
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- the lines "TAG prefix rest" a PyTorch body printed, as t[prefix] = rest
local function printed(out, tag)
  local t = {}
  for p, rest in out:gmatch(tag .. " (%S+) ([^\n]*)") do t[p] = rest end
  return t
end

local function py_bool(v) return v and "True" or "False" end

-- ---- cells -----------------------------------------------------------------------------------------------------

local CELL_CASES = {
  { kind = "RNNCell", I = 3, H = 5, N = 2, steps = 3, state = true },
  { kind = "RNNCell", I = 4, H = 3, N = 3, steps = 3, bias = false, nl = "relu", state = true },
  { kind = "RNNCell", I = 3, H = 4, steps = 2, unbatched = true, state = true },
  { kind = "RNNCell", I = 2, H = 3, N = 4, steps = 2, nl = "relu" },
  { kind = "LSTMCell", I = 3, H = 5, N = 2, steps = 3, state = true },
  { kind = "LSTMCell", I = 3, H = 4, N = 3, steps = 3 },
  { kind = "LSTMCell", I = 5, H = 3, steps = 3, unbatched = true, state = true, bias = false },
  { kind = "LSTMCell", I = 2, H = 3, steps = 2, unbatched = true },
  { kind = "LSTMCell", I = 3, H = 5, N = 2, steps = 3, state = true, dtype = "float32" },
  { kind = "GRUCell", I = 3, H = 5, N = 2, steps = 3, state = true },
  { kind = "GRUCell", I = 4, H = 3, N = 1, steps = 2, bias = false },
  { kind = "GRUCell", I = 3, H = 4, steps = 3, unbatched = true },
  { kind = "GRUCell", I = 3, H = 4, steps = 2, unbatched = true, state = true, dtype = "float32" },
}

local function make_cell(cs)
  if cs.kind == "RNNCell" then return nn.RNNCell(cs.I, cs.H, cs.bias ~= false, cs.nl) end
  return nn[cs.kind](cs.I, cs.H, { bias = cs.bias })
end

-- runs a case in ddplua: the module, its outputs and gradients; adds PyTorch's inputs to `inputs`
local function run_cell(cs, i, inputs)
  local p, dt = "c" .. i .. "_", cs.dtype or "float64"
  ddp.manual_seed(100 + i)
  local m = make_cell(cs):to(dt)
  local lead = cs.unbatched and {} or { cs.N }
  local function shape(last, steps)
    local s = steps and { cs.steps } or {}
    for _, v in ipairs(lead) do s[#s + 1] = v end
    s[#s + 1] = last
    return s
  end
  local lstm = cs.kind == "LSTMCell"
  local x = leaf(shape(cs.I, true), 10 + i, dt)
  local h0 = cs.state and leaf(shape(cs.H), 20 + i, dt)
  local c0 = cs.state and lstm and leaf(shape(cs.H), 30 + i, dt)
  local gy, gc_ = R.randn(shape(cs.H, true), 40 + i):to(dt), R.randn(shape(cs.H, true), 50 + i):to(dt)
  local res = { m = m, hs = {}, cs = {} }
  local h, c = h0, c0
  local loss = 0
  for t = 1, cs.steps do
    if lstm then
      if h == nil then h, c = m(x[t])
      elseif t % 2 == 1 then h, c = m(x[t], { h, c })
      else h, c = m(x[t], h, c) end -- the two-argument form
      loss = loss + (c * gc_[t]):sum()
      res.cs[t] = c:detach()
    else
      h = m(x[t], h)
    end
    assert.are.same(shape(cs.H), h:size())
    assert.are.equal(dt, h:dtype())
    loss = loss + (h * gy[t]):sum()
    res.hs[t] = h:detach()
  end
  loss:backward()
  res.grad_x, res.grad_h, res.grad_c = x.grad, h0 and h0.grad, c0 and c0.grad
  inputs[p .. "x"], inputs[p .. "gy"] = x, gy
  if lstm then inputs[p .. "gc"] = gc_ end
  if h0 then inputs[p .. "h"] = h0 end
  if c0 then inputs[p .. "c"] = c0 end
  for name, t in m:named_parameters() do inputs[p .. name] = t end
  local call = string.format("run_cell(%q, %q, %d, %d, %s, %s)\n", p, cs.kind, cs.I, cs.H, py_bool(cs.bias ~= false),
    cs.nl and string.format("%q", cs.nl) or "None")
  return res, call
end

local CELL_PY = [[
import torch.nn as nn
def run_cell(p, kind, I, H, bias, nl):
    kw = {'bias': bias}
    if nl is not None: kw['nonlinearity'] = nl
    x = T[p + 'x'].clone().requires_grad_()
    m = getattr(nn, kind)(I, H, **kw).to(x.dtype)
    with torch.no_grad():
        for name, t in m.named_parameters(): t.copy_(T[p + name])
    hx, leaves = None, []
    if p + 'h' in T:
        h0 = T[p + 'h'].clone().requires_grad_()
        leaves.append(('h', h0))
        hx = h0
        if kind == 'LSTMCell':
            c0 = T[p + 'c'].clone().requires_grad_()
            leaves.append(('c', c0))
            hx = (h0, c0)
    loss = 0
    for t in range(x.shape[0]):
        hx = m(x[t], hx)
        h = hx[0] if kind == 'LSTMCell' else hx
        OUT[p + 'h%d' % (t + 1)] = h
        loss = loss + (h * T[p + 'gy'][t]).sum()
        if kind == 'LSTMCell':
            OUT[p + 'c%d' % (t + 1)] = hx[1]
            loss = loss + (hx[1] * T[p + 'gc'][t]).sum()
    loss.backward()
    OUT[p + 'grad_x'] = x.grad
    for n, l in leaves: OUT[p + 'grad_' + n] = l.grad
    for name, t in m.named_parameters(): OUT[p + 'grad_' + name] = t.grad
    print('REPR', p, repr(m))
    print('NAMES', p, ' '.join(n for n, _ in m.named_parameters()))
    print('KEYS', p, ' '.join(sorted(m.state_dict().keys())))
]]

describe("nn.RNNCell, nn.LSTMCell, nn.GRUCell", function()
  it("have PyTorch's parameters, shapes, init bounds, state_dict keys and reprs", function()
    ddp.manual_seed(1)
    for kind, G in pairs({ RNNCell = 1, LSTMCell = 4, GRUCell = 3 }) do
      local m = nn[kind](7, 25)
      assert.are.same({ "weight_ih", "weight_hh", "bias_ih", "bias_hh" }, param_names(m))
      assert.are.same({ "bias_hh", "bias_ih", "weight_hh", "weight_ih" }, sorted_keys(m:state_dict()))
      assert.are.same({ G * 25, 7 }, m.weight_ih:size())
      assert.are.same({ G * 25, 25 }, m.weight_hh:size())
      assert.are.same({ G * 25 }, m.bias_ih:size())
      assert.are.same({ G * 25 }, m.bias_hh:size())
      local bound = 1 / math.sqrt(25)
      for name, t in m:named_parameters() do
        local top = t:abs():max():item()
        assert.is_true(top <= bound, kind .. " " .. name .. " exceeds the bound")
        assert.is_true(top > 0.8 * bound, kind .. " " .. name .. " does not fill U(-1/sqrt(H), 1/sqrt(H))")
      end
      local nb = nn[kind](7, 25, { bias = false })
      assert.are.same({ "weight_ih", "weight_hh" }, param_names(nb))
      assert.is_nil(nb.bias_ih)
      assert.is_false(nb.bias)
      assert.is_true(m.bias)
      assert.are.equal(kind .. "(7, 25)", tostring(m))
      assert.are.equal(kind .. "(7, 25, bias=False)", tostring(nb))
      assert.are.equal("float64", nn[kind](2, 3, { dtype = "float64" }).weight_hh:dtype())
    end
    assert.are.equal("RNNCell(3, 4, nonlinearity=relu)", tostring(nn.RNNCell(3, 4, true, "relu")))
    assert.are.equal("RNNCell(3, 4, bias=False, nonlinearity=relu)",
      tostring(nn.RNNCell(3, 4, { nonlinearity = "relu", bias = false })))
    assert.are.equal("tanh", nn.RNNCell(3, 4).nonlinearity)
    assert.is_nil(nn.LSTMCell(3, 4).nonlinearity)
  end)

  it("equal one step of nn.RNN / nn.LSTM / nn.GRU with the same weights, values and gradients", function()
    for _, c in ipairs({ { "RNNCell", "RNN", { 3, 4, 1, "relu" } }, { "RNNCell", "RNN", { 3, 4 } },
      { "LSTMCell", "LSTM", { 3, 4 } }, { "GRUCell", "GRU", { 3, 4 } } }) do
      ddp.manual_seed(3)
      local cell = nn[c[1]](3, 4, c[1] == "RNNCell" and true or nil, c[3][4]):to("float64")
      local seq = nn[c[2]](table.unpack(c[3])):to("float64")
      ddp.no_grad(function()
        for name, t in cell:named_parameters() do seq[name .. "_l0"]:copy_(t) end
      end)
      local x, h0, c0 = leaf({ 2, 3 }, 5), leaf({ 2, 4 }, 6), leaf({ 2, 4 }, 7)
      local h, cc = cell(x, c[1] == "LSTMCell" and { h0, c0 } or h0)
      local loss = (h * R.randn({ 2, 4 }, 8)):sum() + (cc and (cc * R.randn({ 2, 4 }, 9)):sum() or 0)
      loss:backward()
      local gx, gh = x.grad:clone(), h0.grad:clone()
      local gw = cell.weight_hh.grad:clone()
      x.grad, h0.grad, c0.grad = nil, nil, nil
      local out, st = seq(x:unsqueeze(1), c[1] == "LSTMCell" and { h0:unsqueeze(1), c0:unsqueeze(1) } or
        h0:unsqueeze(1))
      local sh, sc = c[1] == "LSTMCell" and st[1] or st, c[1] == "LSTMCell" and st[2] or nil
      close(h, out[1], 1e-12, c[1] .. " h")
      close(h, sh[1], 1e-12, c[1] .. " h_n")
      if cc then close(cc, sc[1], 1e-12, c[1] .. " c") end
      local sloss = (out[1] * R.randn({ 2, 4 }, 8)):sum() + (sc and (sc[1] * R.randn({ 2, 4 }, 9)):sum() or 0)
      sloss:backward()
      close(gx, x.grad, 1e-12, c[1] .. " grad x")
      close(gh, h0.grad, 1e-12, c[1] .. " grad h")
      close(gw, seq.weight_hh_l0.grad, 1e-12, c[1] .. " grad weight_hh")
    end
  end)

  it("match PyTorch: values and gradients of input, state and parameters over unrolled steps", function()
    if not TR.available() then return pending("PyTorch is not available") end
    local inputs, body, results = {}, { CELL_PY }, {}
    for i, cs in ipairs(CELL_CASES) do
      local res, call = run_cell(cs, i, inputs)
      results[i], body[#body + 1] = res, call
    end
    local ref, out = TR.run(table.concat(body), inputs)
    local reprs, names, keys = printed(out, "REPR"), printed(out, "NAMES"), printed(out, "KEYS")
    for i, cs in ipairs(CELL_CASES) do
      local p, res = "c" .. i .. "_", results[i]
      local tol = cs.dtype == "float32" and 2e-5 or 1e-11
      local what = string.format("case %d (%s)", i, tostring(res.m))
      assert.are.equal(reprs[p], tostring(res.m), what .. " repr")
      assert.are.equal(names[p], table.concat(param_names(res.m), " "), what .. " parameter names")
      assert.are.equal(keys[p], table.concat(sorted_keys(res.m:state_dict()), " "), what .. " state_dict keys")
      for t = 1, cs.steps do
        close(res.hs[t], ref[p .. "h" .. t], tol, what .. " h step " .. t)
        if cs.kind == "LSTMCell" then close(res.cs[t], ref[p .. "c" .. t], tol, what .. " c step " .. t) end
      end
      close(res.grad_x, ref[p .. "grad_x"], tol, what .. " grad x")
      if cs.state then
        close(res.grad_h, ref[p .. "grad_h"], tol, what .. " grad h")
        if cs.kind == "LSTMCell" then close(res.grad_c, ref[p .. "grad_c"], tol, what .. " grad c") end
      end
      for name, t in res.m:named_parameters() do
        close(t.grad, ref[p .. "grad_" .. name], tol, what .. " grad " .. name)
      end
    end
  end)

  it("pass finite-difference gradient checks in float64 (input, states and parameters, two steps)", function()
    for _, kind in ipairs({ "RNNCell", "LSTMCell", "GRUCell" }) do
      for _, batched in ipairs({ true, false }) do
        ddp.manual_seed(11)
        local m = nn[kind](2, 3):to("float64")
        local lead = batched and { 2 } or {}
        local function sh(n)
          local s = { table.unpack(lead) }
          s[#s + 1] = n
          return s
        end
        local x1, x2, h, c = gc.smooth_input(sh(2), 1), gc.smooth_input(sh(2), 2), gc.smooth_input(sh(3), 3),
            gc.smooth_input(sh(3), 4)
        local ins = { x1, x2, h, c }
        for _, t in m:named_parameters() do ins[#ins + 1] = t end
        gc.assert_gradcheck(function(a, b, hh, cc)
          if kind == "LSTMCell" then
            local h1, c1 = m(a, { hh, cc })
            local h2, c2 = m(b, h1, c1)
            return ddp.cat({ h2, c2 }, -1)
          end
          return m(b, m(a, hh)) + 0 * cc:sum()
        end, ins, { atol = 1e-7, rtol = 1e-6 })
      end
    end
    local relu = nn.RNNCell(2, 3, false, "relu"):to("float64")
    gc.assert_gradcheck(function(x, w1, w2) return relu(x) end,
      { gc.smooth_input({ 4, 2 }, 5), relu.weight_ih, relu.weight_hh }, { atol = 1e-7, rtol = 1e-6 })
  end)

  it("start from zeros and treat unbatched input as one row", function()
    ddp.manual_seed(5)
    for _, kind in ipairs({ "RNNCell", "LSTMCell", "GRUCell" }) do
      local m = nn[kind](3, 4):to("float64")
      local x = R.randn({ 2, 3 }, 1)
      local z = ddp.zeros({ 2, 4 }, { dtype = "float64" })
      local h, c = m(x)
      local hz, cz = m(x, kind == "LSTMCell" and { z, z } or z)
      close(h, hz, 0, kind .. " zero state")
      if kind == "LSTMCell" then close(c, cz, 0, kind .. " zero cell state") end
      local hu, cu = m(x[2])
      assert.are.same({ 4 }, hu:size())
      close(hu, h[2], 1e-14, kind .. " unbatched")
      if kind == "LSTMCell" then
        assert.are.same({ 4 }, cu:size())
        close(cu, c[2], 1e-14, kind .. " unbatched c")
      else
        assert.is_nil(c)
      end
    end
  end)

  it("reject bad arguments and inputs with errors naming the module", function()
    local l, g = nn.LSTMCell(3, 4), nn.GRUCell(3, 4)
    R.assert_error(function() l(ddp.randn(2, 5)) end, "LSTMCell(3, 4)", "[N, 3] or [3]", "[2, 5]")
    R.assert_error(function() g(ddp.randn(2, 2, 3)) end, "GRUCell(3, 4)", "[2, 2, 3]")
    R.assert_error(function() g(ddp.randn(2, 3), ddp.randn(3, 4)) end, "GRUCell(3, 4)", "h must be [2, 4]", "[3, 4]")
    R.assert_error(function() g(ddp.randn(3), ddp.randn(1, 4)) end, "GRUCell(3, 4)", "h must be [4]", "[1, 4]")
    R.assert_error(function() g(ddp.randn(2, 3), ddp.randn(2, 4), ddp.randn(2, 4)) end, "GRUCell(3, 4)",
      "one state tensor")
    R.assert_error(function() l(ddp.randn(2, 3), ddp.randn(2, 4)) end, "LSTMCell(3, 4)", "{h, c}")
    R.assert_error(function() l(ddp.randn(2, 3), { ddp.randn(2, 4) }) end, "LSTMCell(3, 4)", "c must be [2, 4]")
    R.assert_error(function() l(ddp.randn(2, 3), { ddp.randn(2, 4), ddp.randn(2, 5) }) end, "c must be [2, 4]",
      "[2, 5]")
    R.assert_error(function() l(ddp.randn(2, 3), 7) end, "LSTMCell(3, 4)", "{h, c}")
    R.assert_error(function() nn.RNNCell(3, 4, true, "sigmoid") end, "RNNCell", "sigmoid")
    R.assert_error(function() nn.GRUCell(3, 0) end, "GRUCell", "hidden_size")
    R.assert_error(function() nn.LSTMCell(3, 4, "yes") end, "LSTMCell", "bias")
    R.assert_error(function() nn.LSTMCell(3, 4, { nonlinearity = "relu" }) end, "LSTMCell", "nonlinearity")
    R.assert_error(function() nn.RNNCell(3, 4, true, "tanh", nil, nil, 1) end, "RNNCell", "too many")
  end)
end)

-- ---- 1-d convolutions and pools --------------------------------------------------------------------------------

-- module cases: ddplua's module (built under a fixed seed), PyTorch's constructor and call; fn cases: ddplua's
-- function of (x, w, b) and PyTorch's expression
local CONV_CASES = {
  { m = function() return nn.Conv1d(4, 6, 3, 2, 1, 2, 2) end, py = "nn.Conv1d(4, 6, 3, 2, 1, 2, 2)", x = { 2, 4, 13 } },
  { m = function() return nn.Conv1d(3, 5, 4, { padding = "same", bias = false }) end,
    py = "nn.Conv1d(3, 5, 4, padding='same', bias=False)", x = { 2, 3, 9 } },
  { m = function() return nn.Conv1d(3, 4, 5, { padding = "same", dilation = 2 }) end,
    py = "nn.Conv1d(3, 4, 5, padding='same', dilation=2)", x = { 1, 3, 11 } },
  { m = function() return nn.Conv1d(2, 3, 3, 1, "valid") end, py = "nn.Conv1d(2, 3, 3, 1, 'valid')", x = { 2, 7 } },
  { m = function() return nn.Conv1d(6, 9, { 3 }, { stride = { 3 }, padding = { 2 }, groups = 3 }) end,
    py = "nn.Conv1d(6, 9, (3,), stride=(3,), padding=(2,), groups=3)", x = { 2, 6, 10 } },
  { m = function() return nn.ConvTranspose1d(4, 6, 3, 2, 1, 1, 2, true, 2) end,
    py = "nn.ConvTranspose1d(4, 6, 3, 2, 1, 1, 2, True, 2)", x = { 2, 4, 7 } },
  { m = function() return nn.ConvTranspose1d(3, 2, 4, { stride = 3, bias = false }) end,
    py = "nn.ConvTranspose1d(3, 2, 4, stride=3, bias=False)", x = { 3, 5 } },
  { m = function() return nn.ConvTranspose1d(2, 4, 3, 3, 1) end, py = "nn.ConvTranspose1d(2, 4, 3, 3, 1)",
    x = { 2, 2, 5 }, call = function(m, x) return m(x, { 15 }) end, py_call = "m(x, output_size=[15])" },
  { m = function() return nn.ConvTranspose1d(3, 3, 5, { padding = 3, dilation = 3, groups = 3 }) end,
    py = "nn.ConvTranspose1d(3, 3, 5, padding=3, dilation=3, groups=3)", x = { 1, 3, 6 } },
  { m = function() return nn.MaxPool1d(3, 2, 1) end, py = "nn.MaxPool1d(3, 2, 1)", x = { 2, 3, 10 } },
  { m = function() return nn.MaxPool1d(4, { ceil_mode = true }) end, py = "nn.MaxPool1d(4, ceil_mode=True)",
    x = { 2, 3, 11 } },
  { m = function() return nn.MaxPool1d(3, 2, 1, 1, false, true) end, py = "nn.MaxPool1d(3, 2, 1, 1, False, True)",
    x = { 3, 12 } },
  { m = function() return nn.AvgPool1d(3, 2, 1) end, py = "nn.AvgPool1d(3, 2, 1)", x = { 2, 3, 10 } },
  { m = function() return nn.AvgPool1d(4, 3, 1, true) end, py = "nn.AvgPool1d(4, 3, 1, True)", x = { 2, 2, 12 } },
  { m = function() return nn.AvgPool1d(5) end, py = "nn.AvgPool1d(5)", x = { 4, 11 } },
  { fn = function(x, w, b) return F.conv1d(x, w, b, 2, 1, 1, 1) end, py = "F.conv1d(x, w, b, 2, 1, 1, 1)",
    x = { 2, 4, 9 }, w = { 6, 4, 3 }, b = { 6 } },
  { fn = function(x, w) return F.conv1d(x, w, nil, 1, "same", 3, 2) end, py = "F.conv1d(x, w, None, 1, 'same', 3, 2)",
    x = { 2, 2, 8 }, w = { 4, 1, 2 } },
  { fn = function(x, w) return F.conv1d(x, w) end, py = "F.conv1d(x, w)", x = { 3, 6 }, w = { 2, 3, 6 } },
  { fn = function(x, w, b) return F.conv_transpose1d(x, w, b, 3, 2, 1, 1, 2) end,
    py = "F.conv_transpose1d(x, w, b, 3, 2, 1, 1, 2)", x = { 2, 3, 6 }, w = { 3, 2, 4 }, b = { 2 } },
  { fn = function(x) return F.max_pool1d(x, 3, 1, 1) end, py = "F.max_pool1d(x, 3, 1, 1)", x = { 2, 3, 8 } },
  { fn = function(x) return F.max_pool1d(x, 2, 3, 0, 1, true) end, py = "F.max_pool1d(x, 2, 3, 0, 1, True)",
    x = { 2, 10 } },
  { fn = function(x) return F.avg_pool1d(x, 3, nil, 1, true) end, py = "F.avg_pool1d(x, 3, None, 1, True)",
    x = { 3, 10 } },
  { fn = function(x) return F.avg_pool1d(x, 3, 2, 1, true) end, py = "F.avg_pool1d(x, 3, 2, 1, True)",
    x = { 2, 3, 10 } },
}

local CONV_PY = [[
import torch.nn as nn
import torch.nn.functional as F
def run_case(p, ctor, call):
    x = T[p + 'x'].clone().requires_grad_()
    env = {'nn': nn, 'F': F, 'x': x, 'None': None}
    m = None
    if call is None:
        for k in ('w', 'b'): env[k] = T[p + k].clone().requires_grad_() if p + k in T else None
        y = eval(ctor, env)
        params = [(k, env[k]) for k in ('w', 'b') if env[k] is not None]
    else:
        m = eval(ctor, env).double()
        with torch.no_grad():
            for name, t in m.named_parameters(): t.copy_(T[p + name])
        env['m'] = m
        y = eval(call, env)
        params = list(m.named_parameters())
        print('REPR', p, repr(m))
        print('KEYS', p, ' '.join(m.state_dict().keys()))
    OUT[p + 'y'] = y
    (y * T[p + 'gy']).sum().backward()
    OUT[p + 'grad_x'] = x.grad
    for name, t in params: OUT[p + 'grad_' + name] = t.grad
]]

local function run_conv(cs, i, inputs)
  local p = "k" .. i .. "_"
  ddp.manual_seed(200 + i)
  local x = leaf(cs.x, 300 + i)
  local res, y, params = {}, nil, {}
  if cs.m then
    res.m = cs.m():to("float64")
    y = cs.call and cs.call(res.m, x) or res.m(x)
    for name, t in res.m:named_parameters() do params[#params + 1] = { name, t } end
  else
    local w = cs.w and leaf(cs.w, 400 + i)
    local b = cs.b and leaf(cs.b, 500 + i)
    if w then params[#params + 1] = { "w", w } end
    if b then params[#params + 1] = { "b", b } end
    y = cs.fn(x, w, b)
  end
  local gy = R.randn(y:size(), 600 + i)
  local loss = (y * gy):sum()
  loss:backward()
  res.y, res.grad_x, res.params = y:detach(), x.grad, params
  inputs[p .. "x"], inputs[p .. "gy"] = x, gy
  for _, nt in ipairs(params) do inputs[p .. nt[1]] = nt[2] end
  local call = cs.m and string.format("%q", cs.py_call or "m(x)") or "None"
  return res, string.format("run_case(%q, %q, %s)\n", p, cs.py, call)
end

describe("nn.Conv1d, nn.ConvTranspose1d, nn.MaxPool1d, nn.AvgPool1d and their functional forms", function()
  it("have PyTorch's weight shapes, init bounds, state_dict keys and reprs", function()
    ddp.manual_seed(2)
    local c = nn.Conv1d(4, 8, 5, { groups = 2 })
    assert.are.same({ 8, 2, 5 }, c.weight:size())
    assert.are.same({ 8 }, c.bias:size())
    assert.are.same({ "weight", "bias" }, param_names(c))
    assert.are.same({ "bias", "weight" }, sorted_keys(c:state_dict()))
    local t = nn.ConvTranspose1d(4, 6, 3, { groups = 2 })
    assert.are.same({ 4, 3, 3 }, t.weight:size())
    assert.are.same({ 6 }, t.bias:size())
    -- fan_in: in/groups * k for Conv1d, out/groups * k for ConvTranspose1d (PyTorch's reading of the weight)
    local big = nn.Conv1d(16, 64, 5, { groups = 2 }) -- fan_in 40
    local bigt = nn.ConvTranspose1d(64, 16, 5, { groups = 2 }) -- fan_in 40
    for _, m in ipairs({ big, bigt }) do
      for name, p in m:named_parameters() do
        local top, bound = p:abs():max():item(), 1 / math.sqrt(40)
        assert.is_true(top <= bound, tostring(m) .. " " .. name .. " exceeds 1/sqrt(fan_in)")
        assert.is_true(top > (name == "bias" and 0.7 or 0.95) * bound, tostring(m) .. " " .. name .. " too narrow")
      end
    end
    assert.is_nil(nn.Conv1d(2, 3, 3, { bias = false }).bias)
    assert.are.same({ "weight" }, param_names(nn.ConvTranspose1d(2, 3, 3, 1, 0, 0, 1, false)))
    assert.are.equal("float64", nn.Conv1d(2, 3, 3, { dtype = "float64" }).weight:dtype())
    assert.are.equal("Conv1d(2, 4, kernel_size=(3,), stride=(1,))", tostring(nn.Conv1d(2, 4, 3)))
    assert.are.equal("Conv1d(2, 4, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,), groups=2, bias=False)",
      tostring(nn.Conv1d(2, 4, 3, 2, 1, 2, 2, false)))
    assert.are.equal("Conv1d(2, 4, kernel_size=(3,), stride=(1,), padding=same)",
      tostring(nn.Conv1d(2, 4, 3, { padding = "same" })))
    assert.are.equal("ConvTranspose1d(2, 4, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,), " ..
      "output_padding=(1,), groups=2, bias=False)", tostring(nn.ConvTranspose1d(2, 4, 3, 2, 1, 1, 2, false, 2)))
    assert.are.equal("MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)",
      tostring(nn.MaxPool1d(3)))
    assert.are.equal("MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)",
      tostring(nn.MaxPool1d(3, 2, 1, { ceil_mode = true })))
    assert.are.equal("AvgPool1d(kernel_size=(3,), stride=(2,), padding=(1,))", tostring(nn.AvgPool1d(3, 2, 1, true)))
  end)

  it("match PyTorch: values and gradients of input, weight and bias", function()
    if not TR.available() then return pending("PyTorch is not available") end
    local inputs, body, results = {}, { CONV_PY }, {}
    for i, cs in ipairs(CONV_CASES) do
      local res, call = run_conv(cs, i, inputs)
      results[i], body[#body + 1] = res, call
    end
    local ref, out = TR.run(table.concat(body), inputs)
    local reprs, keys = printed(out, "REPR"), printed(out, "KEYS")
    for i, cs in ipairs(CONV_CASES) do
      local p, res = "k" .. i .. "_", results[i]
      local what = string.format("case %d (%s)", i, cs.py)
      if res.m then
        assert.are.equal(reprs[p], tostring(res.m), what .. " repr")
        assert.are.equal(keys[p], table.concat(param_names(res.m), " "), what .. " state_dict keys")
      end
      close(res.y, ref[p .. "y"], 1e-12, what .. " output")
      close(res.grad_x, ref[p .. "grad_x"], 1e-12, what .. " grad x")
      for _, nt in ipairs(res.params) do
        close(nt[2].grad, ref[p .. "grad_" .. nt[1]], 1e-12, what .. " grad " .. nt[1])
      end
    end
  end)

  it("pass finite-difference gradient checks in float64", function()
    local tol = { atol = 1e-7, rtol = 1e-6 }
    local x, w, b = gc.smooth_input({ 2, 4, 9 }, 1), gc.smooth_input({ 6, 2, 3 }, 2), gc.smooth_input({ 6 }, 3)
    gc.assert_gradcheck(function(x_, w_, b_) return F.conv1d(x_, w_, b_, 2, 1, 2, 2) end, { x, w, b }, tol)
    gc.assert_gradcheck(function(x_, w_) return F.conv1d(x_, w_, nil, 1, "same", 1, 2) end,
      { gc.smooth_input({ 4, 7 }, 4), gc.smooth_input({ 2, 2, 4 }, 5) }, tol)
    gc.assert_gradcheck(function(x_, w_, b_) return F.conv_transpose1d(x_, w_, b_, 2, 1, 1, 2, 2) end,
      { gc.smooth_input({ 2, 4, 5 }, 6), gc.smooth_input({ 4, 3, 3 }, 7), gc.smooth_input({ 6 }, 8) }, tol)
    gc.assert_gradcheck(function(x_) return F.max_pool1d(x_, 3, 2, 1, 1, true) end,
      { gc.smooth_input({ 2, 3, 10 }, 9) }, tol)
    gc.assert_gradcheck(function(x_) return F.avg_pool1d(x_, 4, 3, 1, true) end, { gc.smooth_input({ 2, 12 }, 10) },
      tol)
    ddp.manual_seed(4)
    local m = nn.ConvTranspose1d(2, 3, 3, 2):to("float64")
    gc.assert_gradcheck(function(x_) return m(x_, { 2, 3, 12 }) end, { gc.smooth_input({ 2, 2, 5 }, 11), m.weight,
      m.bias }, tol)
  end)

  it("treat unbatched [C, L] input as one sample", function()
    ddp.manual_seed(6)
    local x = R.randn({ 2, 4, 9 }, 12)
    for _, m in ipairs({ nn.Conv1d(4, 3, 3, 2, 1):to("float64"), nn.ConvTranspose1d(4, 2, 3, 2):to("float64"),
      nn.MaxPool1d(3, 2, 1), nn.AvgPool1d(2) }) do
      local xb, xu = x:clone():requires_grad_(), x[2]:clone():requires_grad_()
      local y = m(xb)
      assert.are.equal(3, y:dim())
      local yu = m(xu)
      assert.are.same({ y:size(2), y:size(3) }, yu:size())
      close(yu, y[2], 1e-14, tostring(m) .. " unbatched")
      local g = R.randn(yu:size(), 13)
      local lb, lu = (y[2] * g):sum(), (yu * g):sum()
      lb:backward()
      lu:backward()
      close(xu.grad, xb.grad[2], 1e-14, tostring(m) .. " unbatched gradient")
    end
  end)

  it("reject bad inputs and unsupported settings with errors naming the module", function()
    local c = nn.Conv1d(4, 6, 3)
    R.assert_error(function() c(ddp.randn(2, 3, 9)) end, "Conv1d(4, 6, kernel_size=(3,)", "[N, 4, L] or [4, L]",
      "[2, 3, 9]")
    R.assert_error(function() c(ddp.randn(2, 4, 1, 9)) end, "Conv1d(4, 6", "[2, 4, 1, 9]")
    R.assert_error(function() c(ddp.randn(2, 4, 2)) end, "conv1d", "does not fit the input length 2")
    R.assert_error(function() nn.ConvTranspose1d(4, 6, 3)(ddp.randn(6, 5)) end, "ConvTranspose1d(4, 6", "[6, 5]")
    R.assert_error(function() nn.ConvTranspose1d(2, 4, 3, 3)(ddp.randn(1, 2, 5), { 20 }) end, "ConvTranspose1d",
      "valid sizes range from 15 to 17")
    local ct = nn.ConvTranspose1d(2, 4, 3, 3)
    local xs = ddp.randn(1, 2, 5)
    assert.are.same({ 1, 4, 17 }, ct(xs, 17):size()) -- a plain length, or it after the leading dims
    assert.are.same({ 1, 4, 16 }, ct(xs, { 1, 4, 16 }):size())
    R.assert_error(function() ct(xs, { 4, 16 }) end, "output_size must be {L} or 3 sizes")
    R.assert_error(function() nn.MaxPool1d(3)(ddp.randn(1, 2, 3, 4)) end, "MaxPool1d(kernel_size=3", "[1, 2, 3, 4]")
    R.assert_error(function() nn.AvgPool1d(4)(ddp.randn(2, 3)) end, "AvgPool1d(kernel_size=(4,)",
      "does not fit the input length 3")
    R.assert_error(function() nn.Conv1d(4, 6, 3, { padding_mode = "wrap" }) end,
      "Conv1d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got 'wrap'")
    R.assert_error(function() nn.ConvTranspose1d(4, 6, 3, { padding_mode = "circular" }) end,
      "ConvTranspose1d: padding_mode=circular is not supported yet")
    R.assert_error(function() nn.MaxPool1d(3, 1, 1, 2) end, "MaxPool1d: dilation=2 is not supported yet")
    R.assert_error(function() nn.MaxPool1d(3, { return_indices = true }) end,
      "MaxPool1d: return_indices=true is not supported yet")
    R.assert_error(function() nn.AvgPool1d(3, 1, 1, false, "no") end,
      "AvgPool1d: count_include_pad must be a boolean, got no")
    R.assert_error(function() F.max_pool1d(ddp.randn(2, 8), 3, 1, 1, 2) end, "max_pool1d: dilation=2 is not supported")
    R.assert_error(function() F.avg_pool1d(ddp.randn(2, 8), 3, 1, 1, false, 0) end,
      "avg_pool1d: count_include_pad must be a boolean")
    R.assert_error(function() nn.MaxPool1d(3, 1, 2) end, "MaxPool1d", "at most half the kernel size 3")
    R.assert_error(function() nn.Conv1d(4, 6, 3, 2, "same") end, "Conv1d", "\"same\" needs stride 1")
    R.assert_error(function() nn.Conv1d(4, 6, 3, { padding = "full" }) end, "Conv1d", "\"full\"")
    R.assert_error(function() nn.Conv1d(4, 6, { 3, 3 }) end, "Conv1d", "kernel_size", "one-element")
    R.assert_error(function() nn.Conv1d(4, 6, 3, 1, 0, 1, 4) end, "Conv1d", "divisible by groups 4")
    R.assert_error(function() nn.ConvTranspose1d(4, 6, 3, 2, 0, 2) end, "ConvTranspose1d", "output_padding",
      "smaller than the stride")
    R.assert_error(function() F.conv1d(ddp.randn(2, 3, 8), ddp.randn(6, 4, 3)) end, "conv1d", "3 channels")
    R.assert_error(function() F.conv1d(ddp.randn(2, 4, 8), ddp.randn(6, 4, 1, 3)) end, "conv1d", "3-dimensional weight")
    R.assert_error(function() F.conv_transpose1d(ddp.randn(2, 4, 8), ddp.randn(3, 4, 3)) end, "conv_transpose1d",
      "4 channels")
    R.assert_error(function() F.avg_pool1d(ddp.randn(2, 3, 4, 8), 2) end, "avg_pool1d", "[N, C, L] or [C, L]")
  end)
end)
