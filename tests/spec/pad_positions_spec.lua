-- F.pad's maps of source positions (core._pad_positions, one pass in C since 2026-12-07; they were Lua lists, ~0.1 s
-- a million positions at every new length): each mode against a plain Lua reference of the map over random sizes
-- and pads, negative pads (crops) included; F.pad's results against PyTorch's for float32 (plane_gather), float64 and
-- int64 (index_select / narrow + cat, which read the map's first and last); a pad of a long signal; bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local F = ddp.nn.F
local positions = ddp.core._pad_positions

-- the map as the Lua lists nn/padding.lua built before: 1-based input positions, 0 for the fill
local function ref_map(mode, n, l, r, start)
  local t = {}
  for j = 0, n + l + r - 1 do
    local p = j - l
    if mode == "constant" then
      t[#t + 1] = (p >= 0 and p < n) and p + 1 or 0
    elseif mode == "reflect" then
      if p < 0 then p = -p elseif p >= n then p = 2 * (n - 1) - p end
      t[#t + 1] = p + 1
    elseif mode == "replicate" then
      t[#t + 1] = math.min(math.max(p, 0), n - 1) + 1
    else
      t[#t + 1] = (start or 0) + p % n + 1
    end
  end
  return t
end

describe("F.pad's position maps", function()
  it("match the reference map in every mode, crops included", function()
    math.randomseed(7)
    for _ = 1, 300 do
      local mode = ({ "constant", "reflect", "replicate", "circular" })[math.random(4)]
      local n = math.random(1, 9)
      local l, r, start
      if mode == "reflect" then
        l, r = math.random(-n + 1, n - 1), math.random(-n + 1, n - 1)
        if n + l + r < 1 then l, r = 0, 0 end
      elseif mode == "circular" then
        l, r, start = math.random(0, n), math.random(0, n), math.random(0, 3)
      else
        l, r = math.random(-n, 2 * n), math.random(-n, 2 * n)
        if n + l + r < 0 then l, r = 0, 0 end
      end
      local t, first, last = positions(mode, n, l, r, start)
      local want = ref_map(mode, n, l, r, start)
      assert.same(want, t:tolist(), string.format("%s n %d pad (%d, %d) start %s", mode, n, l, r, tostring(start)))
      local f, k = nil, nil
      for j, p in ipairs(want) do
        if p ~= 0 then f, k = f or j, j end
      end
      assert.equal(f, first, mode .. " first")
      assert.equal(k, last, mode .. " last")
    end
  end)

  it("give PyTorch's F.pad in float32, float64 and int64, crops included", function()
    local cases = {
      { "constant", { 2, 3, 1, 0 } }, { "constant", { -1, 2, 3, -2 } }, { "constant", { 0, 0, -2, -3 } },
      { "reflect", { 2, 1, 3, 0 } }, { "reflect", { -1, 2, 1, -2 } }, { "replicate", { 4, -2, 0, 5 } },
      { "circular", { 2, 3, 1, 4 } }, { "circular", { -1, 2, 0, -3 } },
    }
    local x = ddp.randn(2, 3, 5, 6)
    local xi = (x * 10):to("int64")
    local script = { "import torch.nn.functional as F" }
    for i, c in ipairs(cases) do
      script[#script + 1] = string.format("OUT['y%d'] = F.pad(T['x'], (%s), mode='%s')", i, table.concat(c[2], ", "),
        c[1])
      if c[1] == "constant" then
        script[#script + 1] = string.format("OUT['i%d'] = F.pad(T['xi'], (%s), mode='constant')", i,
          table.concat(c[2], ", "))
      end
    end
    local ref = TR.run(table.concat(script, "\n"), { x = x, xi = xi })
    for i, c in ipairs(cases) do
      local what = c[1] .. " " .. table.concat(c[2], ",")
      R.assert_close(F.pad(x, c[2], c[1]), R.from(ref["y" .. i]), 0, 0, what .. " float32")
      R.assert_close(F.pad(x:to("float64"), c[2], c[1]), R.from(ref["y" .. i]), 0, 0, what .. " float64")
      if c[1] == "constant" then
        assert.same(ref["i" .. i]:tolist(), F.pad(xi, c[2], c[1]):tolist(), what .. " int64")
      else -- PyTorch pads only floats this way: int64 (index_select per dim) against float64 (plane_gather)
        assert.same(F.pad(xi:to("float64"), c[2], c[1]):to("int64"):tolist(), F.pad(xi, c[2], c[1]):tolist(),
          what .. " int64")
      end
    end
  end)

  it("pad a long signal in every mode", function()
    local n = (1 << 20) + 3
    local x = ddp.arange(1, n + 1):view(1, 1, n)
    for _, mode in ipairs({ "constant", "reflect", "replicate", "circular" }) do
      local y = F.pad(x, { 2, 3 }, mode)
      assert.same({ 1, 1, n + 5 }, y:size())
      local head, tail = y:narrow(3, 1, 4):flatten():tolist(), y:narrow(3, n + 2, 4):flatten():tolist()
      local want = ({
        constant = { { 0, 0, 1, 2 }, { n, 0, 0, 0 } },
        reflect = { { 3, 2, 1, 2 }, { n, n - 1, n - 2, n - 3 } },
        replicate = { { 1, 1, 1, 2 }, { n, n, n, n } },
        circular = { { n - 1, n, 1, 2 }, { n, 1, 2, 3 } },
      })[mode]
      assert.same(want[1], head, mode .. " head")
      assert.same(want[2], tail, mode .. " tail")
    end
  end)

  it("refuse arguments out of range with the op's name", function()
    local big, small = math.maxinteger, math.mininteger
    R.assert_errors({
      { function() return positions("edge", 4, 1, 1) end, "invalid option 'edge'" },
      { function() return positions("constant", -1, 1, 1) end, "_pad_positions: size -1" },
      { function() return positions("reflect", 0, 0, 0) end, "_pad_positions: size 0" },
      { function() return positions("reflect", 4, 4, 0) end, "reflect padding (4, 0) out of range" },
      { function() return positions("circular", 4, 5, 0) end, "circular padding (5, 0) out of range" },
      { function() return positions("circular", 4, -1, 0) end, "circular padding (-1, 0)" },
      { function() return positions("constant", 4, big, 1) end, "is out of range" },
      { function() return positions("constant", 4, 1 << 59, 1) end, "is out of range" },
      { function() return positions("replicate", 4, small, 0) end, "is out of range" },
      { function() return positions("circular", 4, 1, 1, -1) end, "start -1" },
    })
    -- a pad and a crop whose sum stays in range: 6 + (2^63 - 1) - 2^63 = 5 positions, all fill
    local t, first, last = positions("constant", 6, big, small)
    assert.same({ 0, 0, 0, 0, 0 }, t:tolist())
    assert.is_nil(first)
    assert.is_nil(last)
  end)
end)
