-- Order statistics. sort / argsort / topk over whole rows: rows from DP_RADIX_MIN_ROW (48) up take the radix sort
-- of src/backends/cpu/cpu_radix_sort.c, shorter ones the merge sort. Both are checked against a stable sort written
-- here in Lua (NaN after every number, before it descending; -0 equal to +0; ties in position order) in every
-- dtype, along strided dims, and against PyTorch's stable sort. cummax / cummin (core.cum_extreme) against a scan
-- written here, in every dtype. quantile, nanquantile, nanmedian, msort, bincount and histogram (tensor_order.lua)
-- against PyTorch, their gradients against finite differences, and their errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

-- x with NaN where mask is true
local function core_where(mask, x) return ddp.where(mask, 0 / 0, x) end

-- positions (1-based) of row's values in the stable order
local function ref_order(row, largest)
  local p = {}
  for i = 1, #row do p[i] = i end
  table.sort(p, function(i, j)
    local a, b = row[i], row[j]
    local an, bn = a ~= a, b ~= b
    if an or bn then
      if an and bn then return i < j end
      if largest then return an end
      return bn
    end
    if a ~= b then
      if largest then return a > b end
      return a < b
    end
    return i < j
  end)
  return p
end

-- a [rows, n] tensor's rows sorted along dim 2, checked against ref_order value by value and position by position
local function check_rows(x, largest, what)
  local v, i = x:sort(2, largest)
  for r = 1, x:size(1) do
    local row, vr, ir = gc.flat_values(x[r]), gc.flat_values(v[r]), gc.flat_values(i[r])
    local want = ref_order(row, largest)
    for k = 1, #row do
      if ir[k] ~= want[k] then
        error(string.format("%s row %d: position %d is %s, want %s (value %s)", what, r, k, tostring(ir[k]),
          tostring(want[k]), tostring(row[want[k]])))
      end
      local a, b = vr[k], row[want[k]]
      assert(a == b or (a ~= a and b ~= b), what .. ": value " .. k)
    end
  end
end

-- values drawn with many ties, both zeros, infinities and NaN
local function hostile_row(n, seed)
  local g = R.uniform({ n }, 0, 1, seed)
  local specials = { 0 / 0, math.huge, -math.huge, 0.0, -0.0, 1.5, -1.5 }
  local out = {}
  for k, u in ipairs(g:totable()) do
    if u < 0.15 then out[k] = specials[(k % #specials) + 1]
    elseif u < 0.5 then out[k] = math.floor(u * 20) - 5 -- few distinct values: long runs of ties
    else out[k] = (u - 0.75) * 1e3 end
  end
  return out
end

describe("sort over whole rows", function()
  it("orders every dtype as a stable sort does, on both sides of the radix threshold", function()
    for _, n in ipairs({ 1, 2, 47, 48, 49, 300, 2000 }) do
      local rows = {}
      for r = 1, 3 do rows[r] = hostile_row(n, 100 * n + r) end
      local x = ddp.tensor(rows, { dtype = "float64" })
      for _, dt in ipairs({ "float32", "float64", "bfloat16", "float16" }) do
        for _, largest in ipairs({ false, true }) do check_rows(x:to(dt), largest, dt .. " n=" .. n) end
      end
      local ints = x:nan_to_num(0, 1e6, -1e6):to("int64")
      for _, largest in ipairs({ false, true }) do
        check_rows(ints, largest, "int64 n=" .. n)
        check_rows(ints:abs():clamp(0, 255):to("uint8"), largest, "uint8 n=" .. n)
      end
    end
  end)

  it("orders int64 exactly, past float64's 2^53", function()
    local big = 1 << 60
    local row = {}
    for k = 1, 64 do row[k] = big + ((k * 7919) % 64) - 32 end
    row[3], row[9] = math.mininteger, math.maxinteger
    local x = ddp.tensor({ row }, { dtype = "int64" })
    check_rows(x, false, "int64 big")
    check_rows(x, true, "int64 big descending")
    local v = x:sort(2)
    assert.are.equal(math.mininteger, v[1][1]:item())
    assert.are.equal(big - 32, v[1][2]:item())
    assert.are.equal(big - 31, v[1][3]:item())
    for _, n in ipairs({ 64, 7 }) do -- the heap's k (a row past 2^53 takes the radix sort) and a short whole row
      local t = x:narrow(2, 1, n)
      local k = n == 64 and 3 or 6
      local tv, ti = t:topk(k, 2, true)
      local sv, si = t:sort(2, true)
      R.assert_close(tv, R.from(sv:narrow(2, 1, k)), 0, 0, "topk values n=" .. n)
      R.assert_close(ti, R.from(si:narrow(2, 1, k)), 0, 0, "topk positions n=" .. n)
      check_rows(t, true, "int64 big n=" .. n)
    end
  end)

  it("sorts along a strided dim, a transposed view, and takes the top k of long rows", function()
    local x = ddp.tensor({ hostile_row(600, 7), hostile_row(600, 8) }, { dtype = "float32" })
    local v, i = x:t():sort(1, true) -- [600, 2] sorted down each column
    local v2, i2 = x:sort(2, true)
    R.assert_close(v:t(), R.from(v2), 0, 0, "values")
    R.assert_close(i:t(), R.from(i2), 0, 0, "positions")
    local tv, ti = x:topk(400, 2, false) -- k past a quarter of the row: the whole-row path
    local sv, si = x:sort(2)
    R.assert_close(tv, R.from(sv:narrow(2, 1, 400)), 0, 0, "topk values")
    R.assert_close(ti, R.from(si:narrow(2, 1, 400)), 0, 0, "topk positions")
    -- the heap path of a small k (float32 rows: cpu_topk_f32.c), ties, NaN and both zeros included, and a row of
    -- NaNs but for a few numbers (a NaN kept among the smallest until numbers come)
    local nan_row = {}
    for j = 1, 333 do nan_row[j] = (j % 97 == 0) and j or 0 / 0 end
    local h = ddp.tensor({ hostile_row(1000, 9), hostile_row(1000, 10) }, { dtype = "float32" })
    for _, rows in ipairs({ h, ddp.tensor({ nan_row }, { dtype = "float32" }), h:narrow(2, 1, 21) }) do
      for _, k in ipairs({ 1, 3, 5 }) do
        for _, largest in ipairs({ true, false }) do
          local kv, ki = rows:topk(k, 2, largest)
          local sv, si = rows:sort(2, largest)
          R.assert_close(kv, R.from(sv:narrow(2, 1, k)), 0, 0, "small-k topk values")
          R.assert_close(ki, R.from(si:narrow(2, 1, k)), 0, 0, "small-k topk positions")
        end
      end
    end
    local e = ddp.zeros(3, 0):sort(2)
    assert.are.same({ 3, 0 }, e:size())
  end)

  it("carries the gradient to the sorted positions", function()
    gc.assert_gradcheck(function(t) return (t:sort(1)) end, { gc.smooth_input({ 60 }, 41) })
    gc.assert_gradcheck(function(t) return (t:sort(1, true)) end, { gc.smooth_input({ 60, 2 }, 42) })
  end)

  it("matches PyTorch's stable sort", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local f = ddp.tensor({ hostile_row(700, 11), hostile_row(700, 12) }, { dtype = "float32" })
    local d = ddp.tensor({ hostile_row(70, 13) }, { dtype = "float64" })
    local l = ddp.tensor({ hostile_row(900, 14) }):nan_to_num(0, 9e15, -9e15):to("int64")
    local u = R.uniform({ 4, 500 }, 0, 255, 15):to("uint8")
    local got = {}
    for name, t in pairs({ f = f, d = d, l = l, u = u }) do
      for _, desc in ipairs({ false, true }) do
        local v, i = t:sort(2, desc)
        got[name .. tostring(desc)] = { v, i }
      end
    end
    local ref = TR.run([[
for name in ("f", "d", "l", "u"):
    for desc in (False, True):
        v, i = torch.sort(T[name], dim=1, descending=desc, stable=True)
        OUT[name + str(desc).lower() + "v"], OUT[name + str(desc).lower() + "i"] = v, i + 1
]], { f = f, d = d, l = l, u = u })
    for key, vi in pairs(got) do
      R.assert_close(vi[1], R.from(ref[key .. "v"]), 0, 0, key .. " values")
      R.assert_close(vi[2], R.from(ref[key .. "i"]), 0, 0, key .. " positions")
    end
  end)

  it("cummax and cummin: the running extreme's latest position, NaN kept from the first NaN on, every dtype", function()
    local rows = { hostile_row(300, 21), hostile_row(300, 22) }
    local x = ddp.tensor(rows, { dtype = "float64" })
    local cases = { float32 = x:float(), float64 = x, bfloat16 = x:bfloat16(), float16 = x:half(),
      int64 = x:nan_to_num(0, 1e6, -1e6):long(), uint8 = x:nan_to_num(0, 1e6, -1e6):abs():clamp(0, 255):to("uint8") }
    cases.big = ddp.tensor({ { (1 << 60) + 1, 1 << 60, (1 << 60) + 1, (1 << 60) + 2, 1 << 60 } })
    for name, t in pairs(cases) do
      for _, is_max in ipairs({ true, false }) do
        local v, i = (is_max and t.cummax or t.cummin)(t, 2)
        local vt, it_ = gc.flat_values(v), gc.flat_values(i)
        local n = t:size(2)
        for r = 1, t:size(1) do
          local row = gc.flat_values(t[r])
          local cur, best = row[1], 1
          for j = 1, n do
            local e = row[j]
            if j > 1 and (e ~= e or (is_max and e >= cur) or (not is_max and e <= cur)) then cur, best = e, j end
            local at = (r - 1) * n + j
            assert(it_[at] == best, string.format("%s %s row %d col %d: position %s, want %d", name,
              is_max and "cummax" or "cummin", r, j, tostring(it_[at]), best))
            assert(vt[at] == cur or (cur ~= cur and vt[at] ~= vt[at]), name .. ": value")
          end
        end
      end
    end
    local t = x:float():t():contiguous():t() -- a strided view: the scan reads a copy
    local v1, i1 = t:cummax(2)
    local v2, i2 = x:float():cummax(2)
    R.assert_close(v1, R.from(v2), 0, 0, "strided values")
    R.assert_close(i1, R.from(i2), 0, 0, "strided positions")
    R.assert_error(function() x:cummax(3) end, "dim")
  end)
end)

describe("quantiles, histograms and counts", function()
  local function with_nans(shape_, seed)
    local x = R.randn(shape_, seed)
    local m = R.uniform(shape_, 0, 1, seed + 1):lt(0.15)
    return core_where(m, x)
  end

  it("match PyTorch: quantile and nanquantile in every interpolation, nanmedian, msort", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x = with_nans({ 5, 7, 3 }, 51)
    x[2]:fill_(0 / 0) -- a slice of NaNs only along dim 2 for every column
    local f = x:float()
    local q = ddp.tensor({ 0, 0.1, 0.5, 0.77, 1 }, { dtype = "float32" })
    local got = {}
    for _, mode in ipairs({ "linear", "lower", "higher", "midpoint", "nearest" }) do
      got["q_" .. mode] = ddp.quantile(f, q, 2, false, { interpolation = mode })
      got["nq_" .. mode] = ddp.nanquantile(f, q, { dim = 2, keepdim = true, interpolation = mode })
      got["nqall_" .. mode] = f:nanquantile(0.3, { interpolation = mode })
    end
    got.q64 = x:quantile(0.25, -1)
    got.qall = x:nan_to_num(0):quantile(ddp.tensor({ 0.5, 0.9 }, { dtype = "float64" }), { keepdim = true })
    got.nmed = f:nanmedian()
    got.nmed2, got.nmed2i = f:nanmedian(2)
    got.nmed2i = ddp.where(got.nmed2:isnan(), 0, got.nmed2i) -- a slice of NaNs: PyTorch's position is nth_element's
    got.nmed3, got.nmed3i = f:nanmedian(1, true)
    got.ms = f:msort()
    local ref = TR.run([[
f, x, q = T["f"], T["x"], T["q"]
for mode in ("linear", "lower", "higher", "midpoint", "nearest"):
    OUT["q_" + mode] = torch.quantile(f, q, 1, False, interpolation=mode)
    OUT["nq_" + mode] = torch.nanquantile(f, q, dim=1, keepdim=True, interpolation=mode)
    OUT["nqall_" + mode] = f.nanquantile(0.3, interpolation=mode)
OUT["q64"] = x.quantile(0.25, -1)
OUT["qall"] = x.nan_to_num(0).quantile(torch.tensor([0.5, 0.9], dtype=torch.float64), keepdim=True)
OUT["nmed"] = f.nanmedian()
v, i = f.nanmedian(1); OUT["nmed2"], OUT["nmed2i"] = v, torch.where(v.isnan(), 0, i + 1)
v, i = f.nanmedian(0, True); OUT["nmed3"], OUT["nmed3i"] = v, i + 1
OUT["ms"] = f.msort()
]], { f = f, x = x, q = q })
    for k, v in pairs(got) do R.assert_close(v, R.from(ref[k]), 0, 0, k) end
  end)

  it("match PyTorch: bincount and histogram", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local ids = R.uniform({ 300 }, 0, 17, 61):long()
    local w32 = R.uniform({ 300 }, -1, 1, 62):float()
    local v = R.randn({ 40, 25 }, 63):float()
    local edges = ddp.tensor({ -2, -0.5, -0.5, 0, 0.25, 3 }, { dtype = "float32" })
    local got = {
      bc = ids:bincount(), bcw = ids:bincount(w32), bcd = ddp.bincount(ids, { weights = w32:double(), minlength = 30 }),
      bci = ids:bincount(ids), bce = ddp.bincount(ddp.zeros({ 0 }, { dtype = "int64" }), nil, 4),
    }
    got.h, got.he = v:histogram(13)
    got.hr, got.hre = ddp.histogram(v, 7, { range = { -1, 1.5 }, weight = v:abs(), density = true })
    got.ht, got.hte = v:histogram(edges, { density = true })
    got.hz, got.hze = ddp.histogram(ddp.full({ 3 }, 2.0), 4)
    local ref = TR.run([[
ids, w32, v, edges = T["ids"], T["w32"], T["v"], T["edges"]
OUT.update(bc=ids.bincount(), bcw=ids.bincount(w32), bcd=torch.bincount(ids, weights=w32.double(), minlength=30),
           bci=ids.bincount(ids), bce=torch.bincount(torch.zeros(0, dtype=torch.long), minlength=4))
OUT["h"], OUT["he"] = v.histogram(13)
OUT["hr"], OUT["hre"] = torch.histogram(v, 7, range=(-1, 1.5), weight=v.abs(), density=True)
OUT["ht"], OUT["hte"] = v.histogram(edges, density=True)
OUT["hz"], OUT["hze"] = torch.histogram(torch.full((3,), 2.0), 4)
]], { ids = ids, w32 = w32, v = v, edges = edges })
    for k, t in pairs(got) do
      assert.are.equal(ref[k]:dtype(), t:dtype(), k .. " dtype")
      R.assert_close(t, R.from(ref[k]), 1e-6, 1e-6, k)
    end
  end)

  it("histogram's kernel (core.histogram) counts as a loop in Lua: edges hit, the last closed, NaN, inf, outside",
    function()
      -- the bin of v: the last edge at or below it, the last bin closed; nil outside or NaN
      local function ref_hist(vals, wts, e)
        local nb, h = #e - 1, {}
        for b = 1, nb do h[b] = 0 end
        for j, v in ipairs(vals) do
          if v >= e[1] and v <= e[nb + 1] then
            local b = 1
            for k = 1, nb do if e[k] <= v then b = k end end
            h[b] = h[b] + (wts and wts[j] or 1)
          end
        end
        return h
      end
      for _, dt in ipairs({ "float32", "float64" }) do
        for _, case in ipairs({ { 13, { -2.5, 2.5 } }, { 100, { -3, 3.3 } }, { 7, { -1, 1.5 } }, { 1, { 0, 1 } } }) do
          local v = R.randn({ 3001 }, 70 + case[1]):to(dt)
          local _, edges = v:histogram(case[1], { range = case[2] })
          local e = edges:to("float64"):totable()
          v[1], v[2], v[3], v[4] = 0 / 0, math.huge, -math.huge, 5
          v[5], v[6], v[7] = e[1], e[#e], e[math.max(2, #e // 2)] -- the first, the last and a middle edge
          for j = 8, 3001, 97 do v[j] = e[1 + j % #e] end -- more values exactly on edges
          local vals = v:to("float64"):totable()
          local what = dt .. " " .. case[1] .. " bins"
          assert.are.same(ref_hist(vals, nil, e), v:histogram(case[1], { range = case[2] }):to("float64"):totable(),
            what .. " (uniform edges)")
          assert.are.same(ref_hist(vals, nil, e), v:histogram(edges):to("float64"):totable(), what .. " (edges)")
          local w = R.uniform({ 3001 }, -1, 2, 80):to(dt)
          R.assert_close(v:histogram(case[1], { weight = w, range = case[2] }),
            { shape = { case[1] }, v = ref_hist(vals, w:to("float64"):totable(), e) },
            dt == "float32" and 2e-5 or 1e-12, 1e-6, what .. " weighted")
        end
        -- uneven edges with a repeated one (the binary search), and values that are the edges
        local e = ddp.tensor({ -3, -1, -1, -0.2, 0, 0, 0.7, 4 }, { dtype = dt })
        local v = ddp.cat({ R.randn({ 500 }, 90):to(dt) * 2, e, e })
        assert.are.same(ref_hist(v:to("float64"):totable(), nil, e:to("float64"):totable()),
          v:histogram(e):to("float64"):totable(), dt .. " uneven edges")
      end
    end)

  it("histogram's tables: many chunks, one and two threads give the same counts, and hostile calls", function()
    local v = R.randn({ 300001 }, 91):float()
    local w = R.uniform({ 300001 }, 0, 1, 92):float()
    local h1, e1 = v:histogram(64, { weight = w })
    local c1 = v:histogram(64)
    ddp.set_num_threads(2)
    local h2 = v:histogram(64, { weight = w })
    local c2 = v:histogram(64)
    ddp.set_num_threads(1)
    assert.are.same(h1:totable(), h2:totable())
    assert.are.same(c1:totable(), c2:totable())
    assert.are.equal(300001, c1:sum():item()) -- every value is inside its own range
    -- against the composition that runs on other devices: searchsorted, then the counts
    local b = (ddp.searchsorted(e1, v, { right = true }) - 1):clamp(1, 64) -- (1-based insertion positions)
    local want = ddp.zeros({ 64 }, { dtype = "int64" }):scatter_add(1, b, ddp.ones({ 300001 }, { dtype = "int64" }))
    assert.are.same(want:totable(), c1:long():totable())
    -- core.histogram trusts no edge order: any edges are safe, only the result is meaningless
    local bad = ddp.tensor({ 3, -1, 2, 0 / 0, 1 })
    assert.are.equal(4, ddp.core.histogram(v:narrow(1, 1, 1000), nil, bad, true):numel())
    assert.are.equal(4, ddp.core.histogram(v:narrow(1, 1, 1000), nil, bad, false):numel())
    R.assert_error(function() ddp.core.histogram(v, nil, ddp.tensor({ 1 }), true) end, "at least 2 edges")
    R.assert_error(function() ddp.core.histogram(v, nil, ddp.tensor({ 1, 2 }, { dtype = "float64" }), true) end,
      "edges of their dtype")
    R.assert_error(function() ddp.core.histogram(v, w:narrow(1, 1, 5), ddp.tensor({ 1, 2 }), true) end,
      "weights of their length")
    R.assert_error(function() ddp.core.histogram(v:long(), nil, ddp.tensor({ 1, 2 }), true) end,
      "float32 or float64 values")
  end)

  it("has the finite-difference gradient: quantile, nanquantile, nanmedian, msort", function()
    local q = ddp.tensor({ 0.2, 0.5, 0.95 }, { dtype = "float64" })
    gc.assert_gradcheck(function(t) return t:quantile(q, 2) end, { gc.smooth_input({ 3, 9 }, 64) })
    gc.assert_gradcheck(function(t) return t:quantile(0.4, { interpolation = "midpoint" }) end,
      { gc.smooth_input({ 4, 5 }, 65) })
    gc.assert_gradcheck(function(t) return t:nanquantile(0.7, 1) end, { gc.smooth_input({ 6, 2 }, 66) })
    gc.assert_gradcheck(function(t) return (t:nanmedian(2)) end, { gc.smooth_input({ 3, 8 }, 67) })
    gc.assert_gradcheck(function(t) return t:msort() end, { gc.smooth_input({ 5, 3 }, 68) })
  end)

  it("names the argument and what was expected on bad input", function()
    local x = ddp.rand(3, 4)
    R.assert_error(function() x:quantile(1.5) end, "quantile: q must be in the range [0, 1], got 1.5")
    R.assert_error(function() x:quantile(ddp.tensor({ 0.5, 0 / 0 }, { dtype = "float32" })) end, "in the range [0, 1]")
    R.assert_error(function() x:quantile(ddp.tensor({ 0.5 }, { dtype = "float64" })) end, "q must have the input's dtype")
    R.assert_error(function() x:quantile(0.5, { interpolation = "cubic" }) end, "interpolation must be one of")
    R.assert_error(function() x:quantile(0.5, { dims = 1 }) end, "unknown option 'dims'")
    R.assert_error(function() ddp.zeros(0, 3):quantile(0.5) end, "must be non-empty")
    R.assert_error(function() x:long():quantile(0.5) end, "expected a floating-point tensor, got int64")
    R.assert_error(function() x:quantile(0.5, 3) end, "dim 3 is out of range")
    R.assert_error(function() ddp.zeros(2, 0):nanmedian(2) end, "cannot reduce over dim 2 of size 0")
    R.assert_error(function() ddp.tensor({ 1, -2 }):bincount() end, "values must be non-negative, got -2")
    R.assert_error(function() x:bincount() end, "expected a 1-D tensor of non-negative integers, got float32 [3, 4]")
    R.assert_error(function() ddp.tensor({ 1 }):bincount(ddp.ones(2)) end, "weights must be 1-D with the input's 1")
    R.assert_error(function() ddp.tensor({ 1 }):bincount(nil, -1) end, "minlength must be a non-negative integer")
    R.assert_error(function() x:histogram(0) end, "bins must be a positive integer, got 0")
    R.assert_error(function() x:histogram(3, { range = { 0, math.huge } }) end, "is not finite")
    R.assert_error(function() x:histogram(3, { range = { 2, 1 } }) end, "min must not exceed max")
    R.assert_error(function() ddp.tensor({ 1, 0 / 0 }):histogram(3) end, "is not finite")
    R.assert_error(function() x:histogram(ddp.tensor({ 1, 0.5 })) end, "must increase monotonically")
    R.assert_error(function() x:histogram(ddp.tensor({ 0, 1 }), { range = { 0, 1 } }) end, "range must not be given")
    R.assert_error(function() x:histogram(3, { weight = ddp.ones(4) }) end, "weight must be a float32 tensor of")
    R.assert_error(function() x:histogram(3, { range = 1 }) end, "range must be a table of two numbers")
  end)

  it("unique counts integers of a narrow span and sorts the rest, with the same results", function()
    local function check(x, what)
      local v, inv, cnt = ddp.unique(x, { return_inverse = true, return_counts = true })
      local vals = gc.flat_values(x)
      local seen, order = {}, {}
      for _, e in ipairs(vals) do
        if not seen[e] then seen[e] = 0; order[#order + 1] = e end
        seen[e] = seen[e] + 1
      end
      table.sort(order)
      local rank = {}
      for k, e in ipairs(order) do rank[e] = k end
      assert.are.same(order, gc.flat_values(v), what .. " values")
      local c = {}
      for k, e in ipairs(order) do c[k] = seen[e] end
      assert.are.same(c, gc.flat_values(cnt), what .. " counts")
      local want = {}
      for k, e in ipairs(vals) do want[k] = rank[e] end
      assert.are.same(want, gc.flat_values(inv), what .. " inverse")
      assert.are.same(x:size(), inv:size(), what .. " inverse shape")
      assert.are.equal(x:dtype(), v:dtype(), what .. " dtype")
    end
    check((R.uniform({ 40, 30 }, -50, 50, 71)):long(), "narrow span")
    check((R.uniform({ 300 }, 0, 1e9, 72)):long(), "wide span")
    check(ddp.tensor({ math.mininteger, 3, math.maxinteger, 3, -1 }), "the whole int64 range")
    check((R.uniform({ 1000 }, 0, 255, 73)):to("uint8"), "uint8")
    check(ddp.tensor({ 7 }), "one value")
    local v = ddp.unique(ddp.zeros({ 0 }, { dtype = "int64" }))
    assert.are.same({ 0 }, v:size())
  end)

  it("searchsorted: a binary search per value gives the count of boundaries before it, every dtype", function()
    local function count_before(row, x, right)
      if x ~= x then return #row end
      local c = 0
      for _, b in ipairs(row) do
        if b == b and (right and b <= x or (not right and b < x)) then c = c + 1 end
      end
      return c
    end
    local bounds = ddp.tensor({ hostile_row(61, 81), hostile_row(61, 82) }, { dtype = "float64" }):sort(2)
    local vals = ddp.tensor({ hostile_row(203, 83), hostile_row(203, 84) }, { dtype = "float64" })
    local cases = {}
    for _, dt in ipairs({ "float32", "float64", "bfloat16", "float16" }) do cases[dt] = { bounds:to(dt), vals:to(dt) } end
    cases.int64 = { bounds:nan_to_num(0, 1e6, -1e6):long():sort(2), vals:nan_to_num(0, 1e6, -1e6):long() }
    cases.uint8 = { bounds:nan_to_num(0):abs():clamp(0, 255):to("uint8"):sort(2),
      vals:nan_to_num(0):abs():clamp(0, 255):to("uint8") }
    local big = 1 << 60
    cases.big = { ddp.tensor({ { big - 1, big, big, big + 1 } }), ddp.tensor({ { big, big + 1, big - 2, big + 2 } }) }
    for name, c in pairs(cases) do
      for _, right in ipairs({ false, true }) do
        local got = ddp.searchsorted(c[1], c[2], { right = right })
        local shared = ddp.searchsorted(c[1][1], c[2], { right = right }) -- one row of boundaries for both rows
        for r = 1, c[1]:size(1) do
          local row, vs = gc.flat_values(c[1][r]), gc.flat_values(c[2][r])
          local g, gs = gc.flat_values(got[r]), gc.flat_values(shared[r])
          local row1 = gc.flat_values(c[1][1])
          for k, x in ipairs(vs) do
            local want = count_before(row, x, right) + 1
            assert(g[k] == want, string.format("%s right=%s row %d value %s: %d, want %d", name, tostring(right), r,
              tostring(x), g[k], want))
            assert(gs[k] == count_before(row1, x, right) + 1, name .. ": shared boundaries")
          end
        end
      end
    end
    local empty = ddp.searchsorted(ddp.zeros({ 0 }), ddp.tensor({ 1.0, 0 / 0 }, { dtype = "float32" }))
    assert.are.same({ 1, 1 }, gc.flat_values(empty))
    R.assert_error(function() ddp.core.searchsorted(ddp.zeros(2, 3), ddp.zeros(3, 2)) end,
      "expected boundaries [rows or 1, n] and values [rows, m]")
    R.assert_error(function() ddp.core.searchsorted(ddp.zeros(1, 3), ddp.zeros(1, 2):double()) end,
      "expected one dtype")
  end)

  it("nonzero, masked_select (core.nonzero) and core.bincount: a scan's positions, rows around 8, bad input", function()
    for _, n in ipairs({ 1, 7, 8, 9, 17, 64, 131 }) do
      for _, density in ipairs({ 0, 0.03, 0.5, 1 }) do
        local x = R.uniform({ 3, 2, n }, 0, 1, 90 + n):lt(density):to("float32") * R.uniform({ 3, 2, n }, 1, 2, 91)
        local want, k = {}, 0
        for a = 1, 3 do for b = 1, 2 do for c = 1, n do
          if x[a][b][c]:item() ~= 0 then k = k + 1; want[k] = { a, b, c } end
        end end end
        local got = x:nonzero()
        assert.are.same({ k, 3 }, got:size(), "n=" .. n .. " density " .. density)
        if k > 0 then assert.are.same(want, got:totable(), "n=" .. n .. " density " .. density) end
        local flat = x:masked_select(x:ne(0))
        assert.are.equal(k, flat:numel())
        for j = 1, k do assert.are.equal(x[want[j][1]][want[j][2]][want[j][3]]:item(), flat[j]:item()) end
        local t = x:transpose(1, 3) -- a strided mask: read through a contiguous copy
        assert.are.equal(k, t:nonzero():size(1))
      end
    end
    R.assert_error(function() ddp.core.nonzero(ddp.ones(3, { dtype = "uint8" }), 2, true) end,
      "more than the 2 non-zero values counted")
    R.assert_error(function() ddp.core.nonzero(ddp.ones(3, { dtype = "uint8" }), 4, true) end, "a count in [0, 3]")
    R.assert_error(function() ddp.core.nonzero(ddp.ones(3), 3, true) end, "expected a uint8 mask")
    R.assert_error(function() ddp.core.bincount(ddp.tensor({ 1, 5 }), nil, 3) end,
      "value 5 at position 2 is outside [0, 3)")
    R.assert_error(function() ddp.core.bincount(ddp.tensor({ 1 }), ddp.ones(2), 3) end, "weights of their length")
  end)
end)
