-- nn.RNN / nn.LSTM / nn.GRU: PyTorch's parameter names, shapes and init
-- bounds; forward and every gradient against a step-by-step composition of
-- ddplua ops (linear, sigmoid, tanh, chunk) in float64 and float32, over
-- layers, directions, batch_first, initial states and unbatched input;
-- finite differences of the fused recurrence; PyTorch's outputs and
-- gradients with PyTorch's weights; dropout between layers; bad arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn = ddp.nn

-- one direction of one layer, step by step, from the ops it is made of
local function ref_layer(mode, x, p, sfx, h, c, reverse)
  local T = x:size(1)
  local outs = {}
  for s = 1, T do
    local t = reverse and T - s + 1 or s
    local gi = ddp.linear(x[t], p["weight_ih" .. sfx], p["bias_ih" .. sfx])
    local gh = ddp.linear(h, p["weight_hh" .. sfx], p["bias_hh" .. sfx])
    if mode == "LSTM" then
      local i, f, g, o = (gi + gh):chunk(4, 2)
      c = f:sigmoid() * c + i:sigmoid() * g:tanh()
      h = o:sigmoid() * c:tanh()
    elseif mode == "GRU" then
      local ir, iz, inn = gi:chunk(3, 2)
      local hr, hz, hn = gh:chunk(3, 2)
      local r, z = (ir + hr):sigmoid(), (iz + hz):sigmoid()
      local n = (inn + r * hn):tanh()
      h = (1 - z) * n + z * h
    else
      h = mode == "RNN_RELU" and (gi + gh):relu() or (gi + gh):tanh()
    end
    outs[t] = h
  end
  return ddp.stack(outs), h, c
end

local function reference(m, x, h0, c0)
  local p = {}
  for name, t in m:named_parameters() do p[name] = t end
  local mode = m.mode
  if m.batch_first then x = x:transpose(1, 2) end
  local D = m.bidirectional and 2 or 1
  local N, H = x:size(2), m.hidden_size
  local hs, cs, inp = {}, {}, x
  for layer = 0, m.num_layers - 1 do
    local outs = {}
    for d = 0, D - 1 do
      local k = layer * D + d + 1
      local z = ddp.zeros(N, H, { dtype = x:dtype() })
      local sfx = string.format("_l%d%s", layer, d == 1 and "_reverse" or "")
      outs[d + 1], hs[k], cs[k] = ref_layer(mode, inp, p, sfx, h0 and h0[k] or z, c0 and c0[k] or z, d == 1)
    end
    inp = D == 2 and ddp.cat(outs, 3) or outs[1]
  end
  if m.batch_first then inp = inp:transpose(1, 2) end
  return inp, ddp.stack(hs), mode == "LSTM" and ddp.stack(cs) or nil
end

local function grads(m)
  local out = {}
  for name, t in m:named_parameters() do out[name] = t.grad and t.grad:clone() end
  return out
end

local function configs()
  return {
    { cls = "LSTM", args = { 3, 5 } },
    { cls = "GRU", args = { 3, 5, { num_layers = 2, bidirectional = true } } },
    { cls = "LSTM", args = { 3, 4, 2, true, true, 0, true } }, -- PyTorch's positional order, batch_first
    { cls = "RNN", args = { 3, 5, { nonlinearity = "relu", bias = false } } },
    { cls = "RNN", args = { 3, 5, 2 } },
    { cls = "GRU", args = { 3, 4, { batch_first = true } } },
  }
end

describe("nn.RNN, nn.LSTM, nn.GRU", function()
  it("have PyTorch's parameter names, shapes and init bounds", function()
    ddp.manual_seed(0)
    local m = nn.LSTM(10, 20, { num_layers = 2, bidirectional = true })
    local names, shapes = {}, {}
    for name, t in m:named_parameters() do
      names[#names + 1] = name
      shapes[name] = t:size()
      assert.is_true(t:abs():max():item() <= 1 / math.sqrt(20))
    end
    assert.are.same({ "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
      "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1",
      "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse" }, names)
    assert.are.same({ 80, 10 }, shapes.weight_ih_l0)
    assert.are.same({ 80, 40 }, shapes.weight_ih_l1)
    assert.are.same({ 80, 20 }, shapes.weight_hh_l1_reverse)
    assert.are.same({ 60, 3 }, nn.GRU(3, 20).weight_ih_l0:size())
    assert.are.equal("LSTM(10, 20, num_layers=2, bidirectional=True)", tostring(m))
    assert.are.equal("RNN(3, 4, nonlinearity=relu, bias=False)", tostring(nn.RNN(3, 4, { nonlinearity = "relu", bias = false })))
  end)

  it("equal the step-by-step composition, outputs, states and every gradient, float64 and float32", function()
    for ci, cfg in ipairs(configs()) do
      for _, dt in ipairs({ "float64", "float32" }) do
        ddp.manual_seed(ci)
        local m = nn[cfg.cls](table.unpack(cfg.args)):to(dt)
        local T, N = 6, 3
        local shape = m.batch_first and { N, T, 3 } or { T, N, 3 }
        local x = R.randn(shape, 10 + ci):to(dt):clone():requires_grad_()
        local L = m.num_layers * (m.bidirectional and 2 or 1)
        local h0 = R.randn({ L, N, m.hidden_size }, 20 + ci):to(dt):clone():requires_grad_()
        local c0 = R.randn({ L, N, m.hidden_size }, 30 + ci):to(dt):clone():requires_grad_()
        local out, st = m(x, cfg.cls == "LSTM" and { h0, c0 } or h0)
        local h_n = cfg.cls == "LSTM" and st[1] or st
        local gy = R.randn(out:size(), 40 + ci):to(dt)
        local loss = (out * gy):sum() + h_n:sum() * 0.5 + (cfg.cls == "LSTM" and st[2]:sum() * 0.25 or 0)
        loss:backward()
        local g_model, gx, gh0, gc0 = grads(m), x.grad:clone(), h0.grad:clone(), cfg.cls == "LSTM" and c0.grad:clone()
        m:zero_grad()
        x.grad, h0.grad, c0.grad = nil, nil, nil
        local rout, rh, rc = reference(m, x, h0, cfg.cls == "LSTM" and c0 or nil)
        local rloss = (rout * gy):sum() + rh:sum() * 0.5 + (rc and rc:sum() * 0.25 or 0)
        rloss:backward()
        local tol = dt == "float64" and { 1e-12, 1e-10 } or { 2e-6, 2e-5 }
        local what = cfg.cls .. " config " .. ci .. " " .. dt
        R.assert_close(out, R.from(rout), tol[1], tol[2], what .. " output")
        R.assert_close(h_n, R.from(rh), tol[1], tol[2], what .. " h_n")
        if rc then R.assert_close(st[2], R.from(rc), tol[1], tol[2], what .. " c_n") end
        R.assert_close(gx, R.from(x.grad), tol[1], tol[2], what .. " input gradient")
        R.assert_close(gh0, R.from(h0.grad), tol[1], tol[2], what .. " h_0 gradient")
        if gc0 then R.assert_close(gc0, R.from(c0.grad), tol[1], tol[2], what .. " c_0 gradient") end
        for name, t in m:named_parameters() do
          R.assert_close(g_model[name], R.from(t.grad), tol[1], tol[2], what .. " " .. name)
        end
      end
    end
  end)

  it("take unbatched input and no initial state", function()
    ddp.manual_seed(1)
    local m = nn.GRU(3, 4):double()
    local x = R.randn({ 5, 3 }, 50)
    local out, h = m(x)
    assert.are.same({ 5, 4 }, out:size())
    assert.are.same({ 1, 4 }, h:size())
    local bout = m(x:unsqueeze(2))
    R.assert_close(out, R.from(bout:squeeze(2)), 0, 0, "unbatched")
    local lstm = nn.LSTM(3, 4):double()
    local _, st = lstm(x, { ddp.zeros(1, 4, { dtype = "float64" }), ddp.zeros(1, 4, { dtype = "float64" }) })
    assert.are.same({ 1, 4 }, st[2]:size())
  end)

  it("have the finite-difference gradient through the fused recurrence", function()
    for _, mode in ipairs({ "LSTM", "GRU", "RNN_TANH", "RNN_RELU" }) do
      local G = mode == "LSTM" and 4 or mode == "GRU" and 3 or 1
      local inputs = { gc.smooth_input({ 4, 2, G * 3 }, 60), gc.smooth_input({ G * 3, 3 }, 61),
        gc.smooth_input({ G * 3 }, 62), gc.smooth_input({ 2, 3 }, 63), gc.smooth_input({ 2, 3 }, 64) }
      for _, reverse in ipairs({ false, true }) do
        gc.assert_gradcheck(function(xp, w, b, h0, c0)
          local y, h, c = ddp.core._rnn_layer(mode, xp, w * 0.5, b, h0, c0, reverse)
          local r = y:sum(3) + h:sum() * 0.3
          return c and r + c:sum() * 0.2 or r
        end, inputs, { atol = 1e-5 })
      end
    end
  end)

  it("give PyTorch's outputs and gradients with PyTorch's weights", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    for _, cfg in ipairs({
      { cls = "LSTM", py = "torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True)",
        args = { 6, 8, { num_layers = 2, bidirectional = true, batch_first = true } } },
      { cls = "GRU", py = "torch.nn.GRU(6, 8, num_layers=2)", args = { 6, 8, 2 } },
      { cls = "RNN", py = "torch.nn.RNN(6, 8, nonlinearity='relu', bidirectional=True)",
        args = { 6, 8, { nonlinearity = "relu", bidirectional = true } } },
    }) do
      local x = R.randn({ 4, 7, 6 }, 70):float()
      local ref = TR.run(string.format([[
torch.manual_seed(0)
m = %s
x = T["x"].clone().requires_grad_()
out, st = m(x)
h = st[0] if isinstance(st, tuple) else st
(out.sum() * 1.5 + (out ** 2).sum() + h.sum()).backward()
for k, v in m.state_dict().items(): OUT["w." + k] = v
for k, v in m.named_parameters(): OUT["g." + k] = v.grad
OUT["out"], OUT["h"], OUT["gx"] = out, h, x.grad
]], cfg.py), { x = x })
      local m = nn[cfg.cls](table.unpack(cfg.args))
      local sd = {}
      for k, v in pairs(ref) do if k:sub(1, 2) == "w." then sd[k:sub(3)] = v end end
      m:load_state_dict(sd)
      local xx = x:clone():requires_grad_()
      local out, st = m(xx)
      local h = cfg.cls == "LSTM" and st[1] or st
      local loss = out:sum() * 1.5 + (out ^ 2):sum() + h:sum()
      loss:backward()
      R.assert_close(out, R.from(ref.out), 2e-6, 1e-5, cfg.cls .. " output")
      R.assert_close(h, R.from(ref.h), 2e-6, 1e-5, cfg.cls .. " h_n")
      R.assert_close(xx.grad, R.from(ref.gx), 1e-5, 1e-4, cfg.cls .. " input gradient")
      for name, t in m:named_parameters() do
        R.assert_close(t.grad, R.from(ref["g." .. name]), 1e-5, 1e-4, cfg.cls .. " " .. name)
      end
    end
  end)

  it("apply dropout between layers only while training", function()
    ddp.manual_seed(3)
    local m = nn.LSTM(3, 4, { num_layers = 2, dropout = 0.5 }):double()
    local x = R.randn({ 5, 2, 3 }, 80)
    m:eval()
    local a = m(x)
    R.assert_close(a, R.from(reference(m, x)), 1e-12, 1e-12, "eval: no dropout")
    m:train()
    local b = m(x)
    assert.is_true((a - b):abs():max():item() > 1e-6)
  end)

  it("reject bad arguments, naming them", function()
    R.assert_error(function() nn.LSTM(3) end, "LSTM: hidden_size must be a positive integer")
    R.assert_error(function() nn.GRU(3, 4, { layers = 2 }) end, "GRU: unknown option 'layers'")
    R.assert_error(function() nn.RNN(3, 4, { nonlinearity = "sigmoid" }) end, "RNN: unknown nonlinearity 'sigmoid'")
    R.assert_error(function() nn.LSTM(3, 4, { dropout = 2 }) end, "LSTM: dropout must be a number in [0, 1]")
    R.assert_error(function() nn.LSTM(3, 4, 1, true, true, 0, true, 1, 1) end, "LSTM: too many arguments")
    local m = nn.LSTM(3, 4)
    R.assert_error(function() m(ddp.randn(5, 2, 4)) end, "expected input with 3 features")
    R.assert_error(function() m(ddp.randn(5, 2, 3), ddp.zeros(1, 2, 4)) end, "the state must be a table {h_0, c_0}")
    R.assert_error(function() m(ddp.randn(5, 2, 3), { ddp.zeros(1, 3, 4), ddp.zeros(1, 2, 4) }) end,
      "h_0 must be [1, 2, 4], got [1, 3, 4]")
    R.assert_error(function() nn.GRU(3, 4)(ddp.randn(5, 2, 3):long()) end, "")
  end)
end)
