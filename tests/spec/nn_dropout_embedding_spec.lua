-- nn.Dropout, nn.Dropout2d and nn.Embedding (and their nn.F forms).
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local TR = require "helpers.torch_ref"
local nn = ddp.nn

describe("nn.Dropout", function()
  it("zeroes about p of the elements and scales the rest by 1/(1-p) while training", function()
    ddp.manual_seed(1)
    local x = ddp.rand(20000, { dtype = "float64" }) + 1
    local d = nn.Dropout(0.3)
    local y = d(x)
    local xs, ys = gc.flat_values(x), gc.flat_values(y)
    local zeros = 0
    for i, v in ipairs(ys) do
      if v == 0 then
        zeros = zeros + 1
      else
        assert.is_true(math.abs(v - xs[i] / 0.7) < 1e-12, "kept element " .. i .. " is not scaled by 1/(1-p)")
      end
    end
    -- binomial(20000, 0.3): sd ~ 65, so +-400 is far outside chance
    assert.is_true(math.abs(zeros - 6000) < 400, zeros .. " zeros")
    assert.are.equal("Dropout(p=0.3)", tostring(d))
  end)

  it("is reproducible from the seed and the identity in eval mode or with p = 0", function()
    local x = ddp.randn(50, 20)
    ddp.manual_seed(9)
    local a = nn.Dropout(0.5)(x)
    ddp.manual_seed(9)
    local b = nn.Dropout(0.5)(x)
    assert.are.same(a:totable(), b:totable())
    local d = nn.Dropout(0.5):eval()
    assert.are.same(x:totable(), d(x):totable())
    assert.are.same(x:totable(), nn.Dropout(0)(x):totable())
    assert.are.same(x:totable(), nn.F.dropout(x, 0.5, false):totable())
  end)

  it("passes gradients through the kept elements only", function()
    ddp.manual_seed(2)
    local x = ddp.randn(200, { dtype = "float64" }):requires_grad_()
    local y = nn.Dropout(0.4)(x)
    y:sum():backward()
    local ys, gs = gc.flat_values(y), gc.flat_values(x.grad)
    for i, v in ipairs(ys) do
      local want = v == 0 and 0 or 1 / 0.6
      assert.is_true(math.abs(gs[i] - want) < 1e-12)
    end
  end)

  it("rejects a probability outside [0, 1]", function()
    local ok, err = pcall(function() return nn.Dropout(1.5) end)
    assert.is_false(ok)
    assert.matches("Dropout: probability p must be a number in %[0, 1%], got 1.5", err)
  end)
end)

describe("nn.Dropout2d", function()
  -- each (sample, channel) plane is all zero or all x / (1 - p)
  local function planes(x, y, p)
    local n, c = x:size(1), x:size(2)
    local zeroed = 0
    for i = 1, n do
      for j = 1, c do
        local xp, yp = x[i][j]:double(), y[i][j]:double()
        local dropped = yp:abs():max():item() == 0
        if dropped then zeroed = zeroed + 1
        else assert.is_true((yp - xp / (1 - p)):abs():max():item() < 1e-12, "plane " .. i .. "," .. j .. " is mixed") end
      end
    end
    return zeroed
  end

  it("zeroes whole channels with probability p and scales the rest by 1/(1-p), as PyTorch 1.13", function()
    ddp.manual_seed(3)
    local x = ddp.rand(40, 50, 3, 2, { dtype = "float64" }) + 1
    local d = nn.Dropout2d(0.25)
    local zeroed = planes(x, d(x), 0.25)
    -- binomial(2000, 0.25): sd ~ 19, so +-120 is far outside chance
    assert.is_true(math.abs(zeroed - 500) < 120, zeroed .. " of 2000 planes zeroed")
    assert.are.equal("Dropout2d(p=0.25)", tostring(d))
    -- 3-D input: [N, C, L] (PyTorch 1.13's reading), float32 too
    local x3 = ddp.rand(30, 40, 5) + 1
    local z3 = planes(x3, nn.F.dropout2d(x3, 0.5), 0.5)
    assert.is_true(math.abs(z3 - 600) < 110, z3 .. " of 1200 planes zeroed")
    -- PyTorch agrees on the structure: its masks are per (sample, channel) for these shapes too
    if TR.available() then
      local ref = TR.run([[
torch.manual_seed(0)
for k, shape in enumerate([(6, 7, 3, 4), (6, 7, 5)]):
    y = torch.nn.functional.dropout2d(torch.ones(shape, dtype=torch.float64), 0.5, True)
    flat = y.reshape(shape[0], shape[1], -1)
    OUT["mixed%d" % k] = ((flat.amax(2) != flat.amin(2)).sum()).reshape(1).double()]], {})
      assert.are.equal(0, ref.mixed0[1]:item())
      assert.are.equal(0, ref.mixed1[1]:item())
    end
  end)

  it("is the identity in eval mode and at p = 0, zero at p = 1, and passes gradients through kept channels", function()
    local x = ddp.randn(4, 6, 3, 3, { dtype = "float64" })
    local d = nn.Dropout2d()
    assert.are.equal(0.5, d.p)
    d:eval()
    assert.are.same(gc.flat_values(x), gc.flat_values(d(x)))
    assert.are.same(gc.flat_values(x), gc.flat_values(nn.F.dropout2d(x, 0.5, false)))
    assert.are.same(gc.flat_values(x), gc.flat_values(nn.F.dropout2d(x, 0)))
    assert.are.equal(0, nn.F.dropout2d(x, 1):abs():max():item())
    local w = x:clone():requires_grad_()
    ddp.manual_seed(5)
    local y = nn.F.dropout2d(w, 0.4)
    y:sum():backward()
    -- the gradient is the mask: 0 on dropped planes, 1 / 0.6 on kept ones, the same planes as y's
    for i = 1, 4 do
      for j = 1, 6 do
        local g = w.grad[i][j]
        local dropped = y[i][j]:abs():max():item() == 0
        local want = dropped and 0 or 1 / 0.6
        assert.is_true((g - want):abs():max():item() < 1e-12, "gradient of plane " .. i .. "," .. j)
      end
    end
  end)

  it("rejects a probability outside [0, 1] and inputs of fewer than 2 dimensions", function()
    for _, p in ipairs({ -0.1, 1.5, 0 / 0 }) do
      local ok, err = pcall(nn.Dropout2d, p)
      assert.is_false(ok)
      assert.matches("Dropout2d: probability p must be a number in %[0, 1%]", err)
      ok, err = pcall(nn.F.dropout2d, ddp.ones(2, 2, 2, 2), p)
      assert.is_false(ok)
      assert.matches("dropout2d: probability p must be a number in %[0, 1%]", err)
    end
    local ok, err = pcall(nn.F.dropout2d, ddp.ones(5), 0.5)
    assert.is_false(ok)
    assert.matches("dropout2d: expected a 3%-D %[N, C, L%] or 4%-D %[N, C, H, W%] input, got 1%-D", err)
  end)
end)

describe("nn.Embedding", function()
  it("looks up rows by 1-based id and initialises them from N(0, 1)", function()
    ddp.manual_seed(3)
    local emb = nn.Embedding(10, 4)
    assert.are.same({ 10, 4 }, emb.weight:size())
    local W = emb.weight:totable()
    local ids = ddp.tensor({ { 1, 10 }, { 3, 3 } })
    local y = emb(ids)
    assert.are.same({ 2, 2, 4 }, y:size())
    local Y = y:totable()
    assert.are.same(W[1], Y[1][1])
    assert.are.same(W[10], Y[1][2])
    assert.are.same(W[3], Y[2][2])
    local big = nn.Embedding(1000, 20).weight
    assert.is_true(math.abs(big:mean():item()) < 0.05)
    assert.is_true(math.abs(math.sqrt((big * big):mean():item()) - 1) < 0.05)
    assert.are.equal("Embedding(10, 4)", tostring(emb))
  end)

  it("accumulates gradients into the looked-up rows, repeated ids adding up", function()
    local emb = nn.Embedding(5, 3):double()
    local ids = ddp.tensor({ 2, 4, 2, 5 })
    local gy = ddp.randn(4, 3, { dtype = "float64" })
    emb(ids):backward(gy)
    local G, g = gy:totable(), emb.weight.grad:totable()
    local want = { { 0, 0, 0 }, {}, { 0, 0, 0 }, G[2], G[4] }
    for k = 1, 3 do want[2][k] = G[1][k] + G[3][k] end
    assert.is_true(gc.max_abs_diff(emb.weight.grad, want) < 1e-12)
    assert.are.same(g[1], { 0, 0, 0 })
    assert.are.same(emb(ids):totable(), nn.F.embedding(ids, emb.weight):totable())
  end)

  it("padding_idx: the row starts as zeros and gets no gradient, as PyTorch's (also negative, and in nn.F)", function()
    ddp.manual_seed(4)
    local emb = nn.Embedding(6, 3, 2):double()
    assert.are.same({ 0, 0, 0 }, emb.weight[2]:totable())
    assert.are.equal("Embedding(6, 3, padding_idx=2)", tostring(emb))
    assert.are.equal(6, nn.Embedding(6, 3, { padding_idx = -1 }).padding_idx)
    ddp.no_grad(function() emb.weight:copy_(ddp.randn(6, 3, { dtype = "float64" })) end) -- a nonzero padding row
    local ids = ddp.tensor({ { 2, 4, 2 }, { 6, 2, 1 } })
    local gy = ddp.randn(2, 3, 3, { dtype = "float64" })
    local y = emb(ids)
    y:backward(gy)
    local W, G = emb.weight:totable(), emb.weight.grad:totable()
    assert.are.same(W[2], y:totable()[1][1]) -- the forward still reads the row
    assert.are.same({ 0, 0, 0 }, G[2])
    if not TR.available() then return pending("PyTorch is not importable") end
    local ref = TR.run([[
w = T["w"].clone().requires_grad_()
y = torch.nn.functional.embedding(T["ids"] - 1, w, padding_idx=1)
y.backward(T["gy"])
OUT["y"], OUT["g"] = y, w.grad
m = torch.nn.Embedding(6, 3, padding_idx=-1)
OUT["row"] = m.weight[5].detach()
]], { w = emb.weight:detach(), ids = ids, gy = gy })
    assert.is_true(gc.max_abs_diff(y, ref.y:totable()) == 0)
    assert.is_true(gc.max_abs_diff(emb.weight.grad, ref.g:totable()) < 1e-12)
    assert.are.same({ 0, 0, 0 }, ref.row:totable())
    local g2 = ddp.zeros(6, 3, { dtype = "float64" }):requires_grad_()
    nn.F.embedding(ids, g2, 2):backward(gy)
    assert.is_true(gc.max_abs_diff(g2.grad, ref.g:totable()) < 1e-12)
  end)

  it("refuses a padding_idx outside the rows", function()
    for _, bad in ipairs({ 0, 7, -7, 1.5, "1" }) do
      local ok, err = pcall(nn.Embedding, 6, 3, { padding_idx = bad })
      assert.is_false(ok)
      assert.matches("Embedding: padding_idx must be an integer in 1..6 or %-6..%-1, got", err)
    end
    local ok, err = pcall(ddp.embedding, ddp.tensor({ 1 }), ddp.zeros(6, 3), 9)
    assert.is_false(ok)
    assert.matches("embedding: padding_idx must be in 1..6 %(the weight's rows%), got 9", err)
  end)

  it("names a wrong id dtype and an id out of range", function()
    local emb = nn.Embedding(5, 3)
    local ok, err = pcall(function() return emb(ddp.tensor({ 1.0, 2.0 })) end)
    assert.is_false(ok)
    assert.matches("Embedding%(5, 3%): expected an int64 tensor of ids 1..5, got float32 tensor", err)
    ok, err = pcall(function() return emb(ddp.tensor({ 1, 6 })) end)
    assert.is_false(ok)
    assert.matches("6.*out of range", err)
    ok, err = pcall(function() return emb(ddp.tensor({ 0 })) end)
    assert.is_false(ok)
    assert.matches("0.*out of range", err)
  end)
end)
