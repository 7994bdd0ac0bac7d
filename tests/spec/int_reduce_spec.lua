-- The integer reductions' row paths (src/backends/cpu/cpu_reduce.c): int64 max / min / argmax / argmin of
-- contiguous rows of 64 values and more (eight chains of selects, then the first position), int64 and uint8 sums
-- of contiguous rows (lanes, 64 KiB chunks of bytes) and bincount's four tables (src/backends/cpu/cpu_search.c),
-- each against the same computation written here in Lua integers: values past 2^53 that a double would merge,
-- ties (the first position wins), wrapping sums, row lengths around the lanes and chunks, and values outside
-- bincount's range at the start, the middle and the tail.
local ddp = require "ddplua"
local R = require "helpers.ref"

-- n int64 values: a few big ones past 2^53 that differ in their last bits, the rest small; seeded
local function ints(n, seed, big)
  local u = R.uniform({ n }, 0, 1, seed)
  local v = {}
  for i = 1, n do
    local r = u[i]:item()
    v[i] = math.floor(r * 2001) - 1000
    if big and r > 0.97 then v[i] = (1 << 60) + math.floor(r * 100) * (i % 2 == 0 and 1 or -1) end
  end
  return v
end

describe("int64 max, min, argmax, argmin of rows", function()
  it("match a scan in Lua integers, past 2^53, with ties, for row lengths around the lanes", function()
    for _, n in ipairs({ 63, 64, 65, 71, 72, 1000, 4099 }) do
      for _, rows in ipairs({ 1, 3 }) do
        local all = {}
        for r = 1, rows do
          local v = ints(n, n * 10 + r, r ~= 2)
          if r == 3 then v[n] = v[1] end -- a tie of the first value with the last
          all[r] = v
        end
        local t = ddp.tensor(all, { dtype = "int64" })
        for _, want_max in ipairs({ true, false }) do
          local vals, pos = (want_max and t.max or t.min)(t, 2)
          local arg = want_max and t:argmax(2) or t:argmin(2)
          for r = 1, rows do
            local best, at = all[r][1], 1
            for j = 2, n do
              local x = all[r][j]
              if (want_max and x > best) or (not want_max and x < best) then best, at = x, j end
            end
            local what = string.format("%s of row %d of %d", want_max and "max" or "min", r, n)
            assert.are.equal(best, vals[r]:item(), what)
            assert.are.equal(at, pos[r]:item(), what .. ": position")
            assert.are.equal(at, arg[r]:item(), what .. ": arg")
          end
        end
        if rows == 1 then -- the whole tensor
          local m = t:max():item()
          for j = 1, n do assert(all[1][j] <= m) end
          assert.are.equal(t:argmin():item() >= 1, true)
        end
      end
    end
  end)

  it("the first of equal extremes wins, and 2^60 + 1 is above 2^60", function()
    local v = {}
    for j = 1, 200 do v[j] = 1 << 60 end
    v[150], v[170] = (1 << 60) + 1, (1 << 60) + 1
    v[90] = (1 << 60) - 1
    local t = ddp.tensor(v, { dtype = "int64" })
    assert.are.equal(150, t:argmax():item())
    assert.are.equal((1 << 60) + 1, t:max():item())
    assert.are.equal(90, t:argmin():item())
    v[90] = 1 << 60
    assert.are.equal(1, ddp.tensor(v, { dtype = "int64" }):argmin():item())
  end)
end)

describe("integer sums of rows", function()
  it("int64 sums wrap as int64 arithmetic and uint8 sums count every byte across 64 KiB chunks", function()
    for _, n in ipairs({ 7, 8, 9, 1000, 65535, 65536, 65537, 200003 }) do
      local v = ints(math.min(n, 5000), n, true)
      local want = 0
      for j = 1, #v do want = want + v[j] end -- Lua integers wrap like int64
      assert.are.equal(want, ddp.tensor(v, { dtype = "int64" }):sum():item(), "int64 sum of " .. #v)
      local b = (R.uniform({ 2, n }, 0, 256, n) - 0.5):clamp(0, 255):to("uint8")
      local rows = b:sum(2)
      for r = 1, 2 do
        local row, s = b[r]:to("int64"), 0
        local flat = row:totable()
        for j = 1, n do s = s + flat[j] end
        assert.are.equal(s, rows[r]:item(), "uint8 row sum of " .. n)
      end
    end
    local wrap = ddp.tensor({ math.maxinteger, 1, 5, -3, 0, 0, 0, 0, 2 }, { dtype = "int64" })
    assert.are.equal(math.mininteger + 4, wrap:sum():item()) -- max + 1 wraps to min; + 5 - 3 + 2
  end)
end)

describe("bincount's tables", function()
  it("counts as a count in Lua, tails included, and names the first value outside", function()
    for _, n in ipairs({ 16000, 16001, 16003, 70000 }) do
      for _, size in ipairs({ 1, 7, 1000 }) do
        local u = R.uniform({ n }, 0, size, n + size):floor():to("int64")
        local got = u:bincount()
        local want, flat = {}, u:totable()
        for b = 1, size do want[b] = 0 end
        for j = 1, n do want[flat[j] + 1] = want[flat[j] + 1] + 1 end
        assert.are.same(want, got:totable(), "n " .. n .. ", size " .. size)
        assert.are.same(want, ddp.core.bincount(u, nil, size):totable())
      end
    end
    local u = R.uniform({ 40000 }, 0, 100, 3):floor():to("int64")
    for _, case in ipairs({ { 1, -1 }, { 20001, 100 }, { 40000, 1 << 62 }, { 39999, -(1 << 62) } }) do
      local bad = u:clone()
      bad[case[1]] = case[2]
      R.assert_error(function() ddp.core.bincount(bad, nil, 100) end,
        string.format("value %d at position %d is outside [0, 100)", case[2], case[1]))
    end
  end)
end)
