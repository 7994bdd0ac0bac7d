-- nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d against float64 references written
-- here, finite differences, and their errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local nn = ddp.nn

-- x [N][C][H][W] tables; w [O][C][KH][KW]; b [O] or nil
local function conv_reference(x, w, b, sh, sw, ph, pw)
  local N, C, H, W = #x, #x[1], #x[1][1], #x[1][1][1]
  local O, KH, KW = #w, #w[1][1], #w[1][1][1]
  local OH, OW = (H + 2 * ph - KH) // sh + 1, (W + 2 * pw - KW) // sw + 1
  local y = {}
  for n = 1, N do
    y[n] = {}
    for o = 1, O do
      y[n][o] = {}
      for i = 1, OH do
        y[n][o][i] = {}
        for j = 1, OW do
          local acc = b and b[o] or 0
          for c = 1, C do
            for ki = 1, KH do
              for kj = 1, KW do
                local r, s = (i - 1) * sh - ph + ki, (j - 1) * sw - pw + kj
                if r >= 1 and r <= H and s >= 1 and s <= W then acc = acc + x[n][c][r][s] * w[o][c][ki][kj] end
              end
            end
          end
          y[n][o][i][j] = acc
        end
      end
    end
  end
  return y
end

-- kind "max" or "avg" (count_include_pad, PyTorch's default)
local function pool_reference(x, kind, kh, kw, sh, sw, ph, pw)
  local N, C, H, W = #x, #x[1], #x[1][1], #x[1][1][1]
  local OH, OW = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
  local y = {}
  for n = 1, N do
    y[n] = {}
    for c = 1, C do
      y[n][c] = {}
      for i = 1, OH do
        y[n][c][i] = {}
        for j = 1, OW do
          local acc = kind == "max" and -math.huge or 0
          for ki = 1, kh do
            for kj = 1, kw do
              local r, s = (i - 1) * sh - ph + ki, (j - 1) * sw - pw + kj
              if r >= 1 and r <= H and s >= 1 and s <= W then
                local v = x[n][c][r][s]
                if kind == "max" then acc = math.max(acc, v) else acc = acc + v end
              end
            end
          end
          y[n][c][i][j] = kind == "max" and acc or acc / (kh * kw)
        end
      end
    end
  end
  return y
end

describe("nn.Conv2d", function()
  it("has PyTorch's parameter shapes and init bound 1/sqrt(in * kh * kw)", function()
    ddp.manual_seed(1)
    local conv = nn.Conv2d(8, 16, { 3, 5 }, { stride = 2, padding = { 1, 2 } })
    assert.are.same({ 16, 8, 3, 5 }, conv.weight:size())
    assert.are.same({ 16 }, conv.bias:size())
    local bound = 1 / math.sqrt(8 * 3 * 5)
    assert.is_true(conv.weight:abs():max():item() <= bound)
    assert.is_true(conv.weight:abs():max():item() > 0.98 * bound)
    assert.is_true(conv.bias:abs():max():item() <= bound)
    assert.are.equal("Conv2d(8, 16, kernel_size=(3, 5), stride=(2, 2), padding=(1, 2))", tostring(conv))
    assert.are.equal("Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), bias=False)",
      tostring(nn.Conv2d(1, 2, 3, { bias = false })))
  end)

  it("matches a float64 reference with stride, padding and a non-square kernel", function()
    ddp.manual_seed(2)
    for _, case in ipairs({ { 3, 1, 0, true }, { { 2, 3 }, 2, 1, true }, { 3, { 1, 2 }, { 1, 0 }, false } }) do
      local conv = nn.Conv2d(2, 3, case[1], { stride = case[2], padding = case[3], bias = case[4] }):double()
      local x = ddp.randn(2, 2, 6, 7, { dtype = "float64" })
      local y = conv(x)
      local want = conv_reference(x:totable(), conv.weight:totable(), conv.bias and conv.bias:totable(),
        conv.stride[1], conv.stride[2], conv.padding[1], conv.padding[2])
      assert.are.same({ #want, #want[1], #want[1][1], #want[1][1][1] }, y:size())
      assert.is_true(gc.max_abs_diff(y, want) < 1e-12)
    end
  end)

  it("has gradients matching finite differences (float64)", function()
    ddp.manual_seed(3)
    local conv = nn.Conv2d(2, 2, 3, { stride = 2, padding = 1 }):double()
    local x = ddp.randn(2, 2, 5, 5, { dtype = "float64" }):requires_grad_()
    gc.assert_gradcheck(function(z) return conv(z) end, { x, conv.weight, conv.bias })
  end)

  it("names itself and the expected channels on a wrong input", function()
    local conv = nn.Conv2d(3, 8, 3)
    local ok, err = pcall(function() return conv(ddp.zeros(2, 1, 8, 8)) end)
    assert.is_false(ok)
    assert.matches("Conv2d%(3, 8, kernel_size=%(3, 3%), stride=%(1, 1%)%): expected input of shape %[N, 3, H, W%], got "
      .. "%[2, 1, 8, 8%]", err)
    ok, err = pcall(function() return conv(ddp.zeros(3, 8, 8)) end)
    assert.is_false(ok)
    assert.matches("got %[3, 8, 8%]", err)
  end)

  it("rejects bad constructor arguments", function()
    local ok, err = pcall(function() return nn.Conv2d(3, 8, 0) end)
    assert.is_false(ok)
    assert.matches("Conv2d: kernel_size must be a positive integer, got 0", err)
    ok, err = pcall(function() return nn.Conv2d(3, 8, 3, { padding = -1 }) end)
    assert.is_false(ok)
    assert.matches("padding must be a non%-negative integer, got %-1", err)
    ok, err = pcall(function() return nn.Conv2d(3, 8, 3, { dilation = 2 }) end)
    assert.is_false(ok)
    -- PyTorch's setting, which the op does not have yet (issue 14: was "unknown option")
    assert.matches("Conv2d: dilation=2 is not supported yet", err)
    ok, err = pcall(function() return nn.Conv2d(3, 8, 3, { dilatoin = 2 }) end)
    assert.is_false(ok)
    assert.matches("unknown option 'dilatoin'", err)
  end)
end)

describe("pooling modules", function()
  local cases = {
    { "MaxPool2d", "max" },
    { "AvgPool2d", "avg" },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " matches a float64 reference (stride defaults to the kernel size)", function()
      ddp.manual_seed(4)
      local x = ddp.randn(2, 3, 7, 6, { dtype = "float64" })
      local X = x:totable()
      local m = nn[c[1]](2)
      assert.are.same({ 2, 2 }, m.stride)
      assert.is_true(gc.max_abs_diff(m(x), pool_reference(X, c[2], 2, 2, 2, 2, 0, 0)) < 1e-12)
      m = nn[c[1]]({ 3, 2 }, { stride = { 2, 1 }, padding = 1 })
      assert.is_true(gc.max_abs_diff(m(x), pool_reference(X, c[2], 3, 2, 2, 1, 1, 1)) < 1e-12)
      m = nn[c[1]](3, 1, 1)
      assert.is_true(gc.max_abs_diff(m(x), pool_reference(X, c[2], 3, 3, 1, 1, 1, 1)) < 1e-12)
      assert.are.equal(c[1] .. "(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))", tostring(m))
    end)

    it(c[1] .. " has gradients matching finite differences", function()
      local x = gc.smooth_input({ 1, 2, 5, 5 }, 9)
      local m = nn[c[1]](2, 1)
      gc.assert_gradcheck(function(z) return m(z) end, { x })
    end)

    it(c[1] .. " rejects padding over half the kernel and non-4-D input", function()
      local ok, err = pcall(function() return nn[c[1]](2, 2, 2) end)
      assert.is_false(ok)
      assert.matches(c[1] .. ": padding %(2, 2%) must be at most half the kernel size %(2, 2%)", err)
      ok, err = pcall(function() return nn[c[1]](2)(ddp.zeros(4, 4)) end)
      assert.is_false(ok)
      assert.matches("expected input of shape %[N, C, H, W%], got %[4, 4%]", err)
    end)
  end
end)
