-- F.ctc_loss and nn.CTCLoss (nn/loss_ctc.lua, src/ops/ctc.c, src/backends/cpu/cpu_ctc.c) against PyTorch 1.13's:
-- losses and gradients in float64 and float32 over unequal input and target lengths, repeated labels, an empty
-- target, padded and concatenated targets, another blank, every reduction, zero_infinity with an impossible
-- sample, the unbatched form; the logits' gradient through log_softmax against finite differences; a small model
-- that learns a sequence; bad arguments named. ddplua's classes (and blank) are PyTorch's + 1.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"
local nn, F = ddp.nn, ddp.nn.F

local T, N, C = 12, 5, 6
local IL = { 12, 9, 7, 12, 3 }
local TL = { 5, 3, 0, 4, 2 }
-- PyTorch's 0-based labels, blank 0: repeats (2, 2) need a blank between them
local TARGETS0 = { { 1, 2, 2, 3, 5 }, { 4, 4, 4, 0, 0 }, { 0, 0, 0, 0, 0 }, { 5, 1, 5, 1, 0 }, { 3, 3, 0, 0, 0 } }

local function targets(shift)
  local t = {}
  for i, row in ipairs(TARGETS0) do
    t[i] = {}
    for j, v in ipairs(row) do t[i][j] = j <= TL[i] and v + shift or 0 end
  end
  return ddp.tensor(t, { dtype = "int64" })
end

local function concatenated(shift)
  local flat = {}
  for i, row in ipairs(TARGETS0) do
    for j = 1, TL[i] do flat[#flat + 1] = row[j] + shift end
  end
  return ddp.tensor(flat, { dtype = "int64" })
end

describe("ctc_loss", function()
  it("gives PyTorch's losses and gradients for every reduction, in float64 and float32", function()
    ddp.manual_seed(501)
    local logits = ddp.randn({ T, N, C }, { dtype = "float64" })
    local ref = TR.run([[
import torch, torch.nn.functional as F
tg, il, tl = T['tg'], T['il'], T['tl']
for red in ('none', 'sum', 'mean'):
    lp = T['logits'].log_softmax(2).detach().requires_grad_()
    loss = F.ctc_loss(lp, tg, il, tl, reduction=red)
    g = torch.arange(1., 6., dtype=torch.float64) / 3 if red == 'none' else torch.tensor(1.5, dtype=torch.float64)
    loss.backward(g)
    OUT['loss_' + red], OUT['grad_' + red] = loss, lp.grad
# the logits' gradient through log_softmax, and another blank (2) with labels that avoid it
x = T['logits'].clone().requires_grad_()
F.ctc_loss(x.log_softmax(2), tg, il, tl).backward()
OUT['gx'] = x.grad
tg2 = torch.where(tg == 2, torch.zeros_like(tg), tg)
OUT['blank2'] = F.ctc_loss(T['logits'].log_softmax(2), tg2, il, tl, blank=2, reduction='none')
]], { logits = logits, tg = targets(0), il = ddp.tensor(IL, { dtype = "int64" }),
      tl = ddp.tensor(TL, { dtype = "int64" }) })
    for _, dt in ipairs({ "float64", "float32" }) do
      local tol = dt == "float64" and 1e-10 or 2e-5
      for _, red in ipairs({ "none", "sum", "mean" }) do
        local lp = logits:to(dt):log_softmax(3):detach():requires_grad_()
        local tg = red == "sum" and concatenated(1) or targets(1) -- both forms of the targets
        local loss = F.ctc_loss(lp, tg, IL, ddp.tensor(TL, { dtype = "int64" }), { reduction = red })
        local g = red == "none" and ddp.arange(1, 6):to(dt) / 3 or ddp.tensor(1.5, { dtype = dt })
        loss:backward(g)
        R.assert_close(loss, R.from(ref["loss_" .. red]), tol, tol, dt .. " " .. red)
        R.assert_close(lp.grad, R.from(ref["grad_" .. red]), tol, tol, dt .. " " .. red .. ": gradient")
      end
      local x = logits:to(dt):detach():clone():requires_grad_()
      F.ctc_loss(F.log_softmax(x, 3), targets(1), IL, TL):backward()
      R.assert_close(x.grad, R.from(ref.gx), tol, tol, dt .. ": the logits' gradient")
    end
    -- blank = 3 here is PyTorch's 2; labels that were 2 (here 3) moved to PyTorch's 0 (here 1)
    local tg2 = targets(1)
    tg2 = ddp.where(tg2:eq(3), ddp.ones_like(tg2), tg2)
    local b2 = F.ctc_loss(logits:log_softmax(3), tg2, IL, TL, { blank = 3, reduction = "none" })
    R.assert_close(b2, R.from(ref.blank2), 1e-10, 1e-10, "blank 3")
  end)

  it("zeroes impossible samples with zero_infinity, and takes the unbatched form", function()
    ddp.manual_seed(502)
    local logits = ddp.randn({ 6, 3, 4 }, { dtype = "float64" })
    local tg = ddp.tensor({ { 2, 3, 4, 2 }, { 3, 3, 3, 3 }, { 4, 2, 0, 0 } }, { dtype = "int64" })
    local ref = TR.run([[
import torch, torch.nn.functional as F
for zi in (False, True):
    lp = T['logits'].log_softmax(2).detach().requires_grad_()
    loss = F.ctc_loss(lp, T['tg'], (6, 4, 5), (4, 4, 2), reduction='none', zero_infinity=zi)
    loss.sum().backward() if zi else None
    OUT['loss%d' % zi] = loss
    if zi: OUT['grad1'] = lp.grad
lp = T['logits'][:, 0].log_softmax(1)
OUT['single'] = F.ctc_loss(lp, T['tg'][0], torch.tensor(6), torch.tensor(4))
]], { logits = logits, tg = (tg - 1):clamp_min(0) })
    -- the second sample (4 repeats of one label needs 7 steps) cannot align in 4
    local plain = F.ctc_loss(logits:log_softmax(3), tg, { 6, 4, 5 }, { 4, 4, 2 }, { reduction = "none" })
    assert.equal(math.huge, plain[2]:item())
    R.assert_close(plain, R.from(ref.loss0), 1e-10, 1e-10, "inf kept")
    local lp = logits:log_softmax(3):detach():requires_grad_()
    local zi = F.ctc_loss(lp, tg, { 6, 4, 5 }, { 4, 4, 2 }, { reduction = "none", zero_infinity = true })
    zi:sum():backward()
    R.assert_close(zi, R.from(ref.loss1), 1e-10, 1e-10, "zero_infinity")
    R.assert_close(lp.grad, R.from(ref.grad1), 1e-10, 1e-10, "zero_infinity: gradient")
    assert.equal(0, lp.grad:select(2, 2):abs():sum():item())
    local single = F.ctc_loss(logits:select(2, 1):log_softmax(2), tg[1], 6, 4)
    R.assert_close(single, R.from(ref.single), 1e-10, 1e-10, "unbatched")
    -- an input length of 0: loss 0 for an empty target, inf otherwise
    local e = F.ctc_loss(logits:log_softmax(3), tg, { 0, 0, 6 }, { 0, 1, 2 }, { reduction = "none" })
    assert.same({ 0, math.huge }, { e[1]:item(), e[2]:item() })
  end)

  it("keeps float32's loss and gradient within float32's rounding over long sequences", function()
    -- float32 log-probabilities run the recursions' exps and logs in float (as PyTorch's kernel): 400 steps and 100
    -- labels against the same values in float64
    ddp.manual_seed(505)
    local x = ddp.randn({ 400, 3, 30 }, { dtype = "float64" }):log_softmax(3):float():double()
    local tg = (ddp.rand(3, 100) * 29):floor():long() + 2
    local il, tl = { 400, 350, 300 }, { 100, 90, 80 }
    local ref_lp = x:detach():requires_grad_()
    local ref = F.ctc_loss(ref_lp, tg, il, tl, { reduction = "none" })
    ref:sum():backward()
    local lp = x:float():requires_grad_()
    local got = F.ctc_loss(lp, tg, il, tl, { reduction = "none" })
    got:sum():backward()
    R.assert_close(got:double(), R.from(ref), 0, 2e-6, "float32 losses")
    R.assert_close(lp.grad:double(), R.from(ref_lp.grad), 2e-5, 0, "float32 gradient")
  end)

  it("gives the logits' gradient that finite differences give", function()
    ddp.manual_seed(503)
    gc.assert_gradcheck(function(x)
      return F.ctc_loss(F.log_softmax(x, 3), ddp.tensor({ { 2, 3, 3 }, { 4, 0, 0 } }, { dtype = "int64" }), { 5, 4 },
        { 3, 1 }, { reduction = "sum" })
    end, { ddp.randn({ 5, 2, 4 }, { dtype = "float64" }):requires_grad_() })
  end)

  it("trains a model to emit a label sequence", function()
    ddp.manual_seed(504)
    local Tn, Nb, H = 16, 8, 12
    local model = nn.Sequential { nn.Linear(H, 32), nn.Tanh(), nn.Linear(32, 5) }
    local opt = ddp.optim.Adam(model:parameters(), { lr = 0.01 })
    local ctc = nn.CTCLoss()
    assert.equal("CTCLoss()", tostring(ctc))
    local x = ddp.randn(Tn, Nb, H)
    -- every sample's sequence is 2 3 3 4 (blank 1 between the 3s)
    local tg = ddp.tensor({ 2, 3, 3, 4 }, { dtype = "int64" }):view(1, 4):expand(Nb, 4):contiguous()
    local first, last
    for step = 1, 150 do
      local loss = ctc(F.log_softmax(model(x), 3), tg, ddp.full({ Nb }, Tn):long(), ddp.full({ Nb }, 4):long())
      opt:zero_grad()
      loss:backward()
      opt:step()
      first = first or loss:item()
      last = loss:item()
    end
    assert.is_true(last < first / 10, string.format("loss %.4f -> %.4f", first, last))
    -- greedy decoding of the first sample: collapse repeats, drop blanks
    local best = model(x):argmax(3):select(2, 1):totable()
    local out, prev = {}, nil
    for _, k in ipairs(best) do
      if k ~= prev and k ~= 1 then out[#out + 1] = k end
      prev = k
    end
    assert.same({ 2, 3, 3, 4 }, out)
  end)

  it("names bad arguments", function()
    local lp = ddp.randn(6, 2, 4):log_softmax(3)
    local tg = ddp.tensor({ { 2, 3 }, { 4, 2 } }, { dtype = "int64" })
    R.assert_errors({
      { function() F.ctc_loss(lp, tg, { 7, 6 }, { 2, 2 }) end, "input_lengths[1] is 7, expected 0 .. 6" },
      { function() F.ctc_loss(lp, tg, { 6, 6 }, { 3, 2 }) end, "target_lengths[1] is 3, expected 0 .. 2" },
      { function() F.ctc_loss(lp, tg, { 6, 6 }, { -1, 2 }) end, "target_lengths[1] is -1" },
      { function() F.ctc_loss(lp, tg:add(-1), { 6, 6 }, { 2, 2 }) end,
        "sample 1's label 1 is 1, expected a class in 1 .. 4 other than the blank 1" },
      { function() F.ctc_loss(lp, tg * 2, { 6, 6 }, { 2, 2 }) end, "sample 1's label 2 is 6" },
      { function() F.ctc_loss(lp, tg:double(), { 6, 6 }, { 2, 2 }) end, "targets must be int64" },
      { function() F.ctc_loss(lp, tg, { 6 }, { 2, 2 }) end, "input_lengths must be an int64 tensor of 2 lengths" },
      { function() F.ctc_loss(lp, tg, { 6, 6.5 }, { 2, 2 }) end, "input_lengths must hold integers" },
      { function() F.ctc_loss(lp, ddp.tensor({ 2, 3, 4 }, { dtype = "int64" }), { 6, 6 }, { 2, 2 }) end,
        "the target_lengths add up to 4 but the concatenated targets hold 3" },
      { function() F.ctc_loss(lp, tg, { 6, 6 }, { 2, 2 }, { blank = 5 }) end, "blank 5 is not a class" },
      { function() F.ctc_loss(lp, tg, { 6, 6 }, { 2, 2 }, { blank = math.mininteger }) end, "blank must be a class" },
      { function() F.ctc_loss(lp, tg, { 6, 6 }, { 2, 2 }, { reduction = "avg" }) end, "reduction must be" },
      { function() F.ctc_loss(lp, tg, { 6, 6 }, { 2, 2 }, { zero_inf = true }) end, "unknown option 'zero_inf'" },
      { function() F.ctc_loss(lp:unsqueeze(1), tg, { 6, 6 }, { 2, 2 }) end, "log_probs must be [T, N, C]" },
      { function() F.ctc_loss(lp:long(), tg, { 6, 6 }, { 2, 2 }) end, "log_probs must be float32 or float64" },
      { function() F.ctc_loss(lp, tg, { 2 ^ 40, 6 }, { 2, 2 }) end, "input_lengths must hold integers" },
      { function() ddp.core._ctc_loss(lp, tg, ddp.tensor({ 6, 6 }, { dtype = "int64" }),
        ddp.tensor({ 2, 2 }, { dtype = "int64" }), math.mininteger) end, "blank must be a class (>= 1)" },
      { function() nn.CTCLoss { blank = 0 } end, "CTCLoss: blank must be a class index" },
    })
  end)
end)
