-- DistributedSampler against PyTorch's semantics (DESIGN.md section 8):
-- per-rank counts and padding, disjointness apart from the padding, full
-- coverage, set_epoch, one order on every rank; checked against PyTorch's
-- own DistributedSampler (shuffle=false, where the order does not depend
-- on the generator) when /usr/bin/python3 has torch.
local ddp = require "ddplua"
local data = ddp.data
local DS = data.DistributedSampler

-- PyTorch's algorithm on a given global order (0-based positions 0..N-1 in
-- `order`), written out independently: returns rank r's 1-based indices.
local function reference(order, N, R, r, drop_last)
  local num_samples
  if drop_last and N % R ~= 0 then num_samples = math.ceil((N - R) / R) else num_samples = math.ceil(N / R) end
  local total = num_samples * R
  local idx = {}
  for i = 1, N do idx[i] = order[i] end
  if not drop_last then
    local pad = total - #idx
    if pad <= #idx then
      for i = 1, pad do idx[#idx + 1] = idx[i] end
    else
      local base = { table.unpack(idx) }
      local k = 0
      while #idx < total do
        k = k % #base + 1
        idx[#idx + 1] = base[k]
      end
    end
  else
    for i = #idx, total + 1, -1 do idx[i] = nil end
  end
  local out = {}
  for p = r + 1, total, R do out[#out + 1] = idx[p] + 1 end
  return out, num_samples
end

describe("DistributedSampler", function()
  it("5 items on 2 ranks: 3 each, one duplicate (the seed's example)", function()
    local a = DS(5, { num_replicas = 2, rank = 0, shuffle = false }):indices()
    local b = DS(5, { num_replicas = 2, rank = 1, shuffle = false }):indices()
    assert.are.same({ 1, 3, 5 }, a)
    assert.are.same({ 2, 4, 1 }, b)
  end)

  it("matches PyTorch's algorithm for many (N, R, drop_last) without shuffle", function()
    for _, N in ipairs({ 1, 2, 3, 5, 7, 10, 16, 33 }) do
      for _, R in ipairs({ 1, 2, 3, 4, 7, 8 }) do
        for _, drop in ipairs({ false, true }) do
          local order = {}
          for i = 1, N do order[i] = i - 1 end
          for r = 0, R - 1 do
            local s = DS(N, { num_replicas = R, rank = r, shuffle = false, drop_last = drop })
            local want, ns = reference(order, N, R, r, drop)
            assert.are.same(want, s:indices(), string.format("N=%d R=%d rank=%d drop_last=%s", N, R, r, drop))
            assert.are.equal(ns, #s)
          end
        end
      end
    end
  end)

  it("with shuffle: counts, disjointness apart from padding, full coverage", function()
    for _, N in ipairs({ 5, 10, 31, 64 }) do
      for _, R in ipairs({ 2, 3, 4 }) do
        for _, drop in ipairs({ false, true }) do
          local counts, total = {}, 0
          -- the epoch's permutation (the first N entries of the padded order)
          local global = DS(N, { num_replicas = R, rank = 0, seed = 5 }):global_indices()
          -- the padded global order is a permutation of 1..N followed by repeats of its head
          local seen = {}
          for p = 1, math.min(N, #global) do
            assert.is_nil(seen[global[p]], "repeated before the padding")
            seen[global[p]] = true
          end
          for r = 0, R - 1 do
            local s = DS(N, { num_replicas = R, rank = r, seed = 5, drop_last = drop })
            local want = reference((function()
              local o = {}
              for i = 1, N do o[i] = global[i] - 1 end
              return o
            end)(), N, R, r, drop)
            local mine = s:indices()
            assert.are.same(want, mine)
            for _, i in ipairs(mine) do
              counts[i] = (counts[i] or 0) + 1
              total = total + 1
            end
          end
          local per = drop and (N // R) or math.ceil(N / R)
          assert.are.equal(per * R, total)
          local dup = 0
          for i = 1, N do
            if not drop then assert.is_true((counts[i] or 0) >= 1, "item " .. i .. " never seen") end
            if (counts[i] or 0) > 1 then dup = dup + counts[i] - 1 end
          end
          assert.are.equal(drop and 0 or (per * R - N), dup)
        end
      end
    end
  end)

  it("set_epoch changes the order; the same seed and epoch give the same order on every rank", function()
    local a = DS(100, { num_replicas = 2, rank = 0, seed = 1 })
    local b = DS(100, { num_replicas = 2, rank = 1, seed = 1 })
    local ga, gb = a:global_indices(), b:global_indices()
    assert.are.same(ga, gb)
    a:set_epoch(1)
    assert.are_not.same(ga, a:global_indices())
    b:set_epoch(1)
    assert.are.same(a:global_indices(), b:global_indices())
    local c = DS(100, { num_replicas = 2, rank = 0, seed = 2 })
    assert.are_not.same(ga, c:global_indices())
  end)

  it("warns once when an epoch's order is drawn again without set_epoch", function()
    local s = DS(10, { num_replicas = 2, rank = 0 })
    local tmp = os.tmpname()
    local real = io.stderr
    local f = io.open(tmp, "w")
    io.stderr = f
    s:indices()
    s:indices()
    s:indices()
    io.stderr = real
    f:close()
    local text = io.open(tmp):read("a")
    os.remove(tmp)
    local n = select(2, text:gsub("set_epoch", ""))
    assert.are.equal(1, n, text)
    s:set_epoch(1)
  end)

  it("gather_order lists every item's row exactly once", function()
    for _, N in ipairs({ 5, 7, 12 }) do
      local R = 3
      local rows = {}
      local s0 = DS(N, { num_replicas = R, rank = 0, shuffle = false })
      local per_rank = {}
      for r = 0, R - 1 do per_rank[r] = DS(N, { num_replicas = R, rank = r, shuffle = false }):indices() end
      -- rank-major concatenation, as all_gather produces it
      local gathered = {}
      for r = 0, R - 1 do for _, i in ipairs(per_rank[r]) do gathered[#gathered + 1] = i end end
      local seen = {}
      for _, row in ipairs(s0:gather_order()) do
        local item = gathered[row]
        assert.is_nil(seen[item])
        seen[item] = true
        rows[#rows + 1] = row
      end
      assert.are.equal(N, #rows)
    end
  end)

  it("bad input is named", function()
    assert.has_error(function() DS(5, { num_replicas = 2, rank = 2 }) end,
      "DistributedSampler: invalid rank 2, expected 0..1")
    assert.has_error(function() DS(5, { num_replicas = 0, rank = 0 }) end)
    local ok, err = pcall(DS, 5, { num_replicas = 2, rank = 0, shufle = true })
    assert.is_false(ok)
    assert.matches("unknown option 'shufle'", err)
    ok, err = pcall(DS, 5, {})
    assert.is_false(ok)
    assert.matches("process group is not initialised", err)
  end)

  local has_torch = os.execute("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1")
  it("equals PyTorch's DistributedSampler (shuffle=false) on several cases", function()
    if not has_torch then
      pending("skipped: /usr/bin/python3 cannot import torch")
      return
    end
    local cases = { { 5, 2, false }, { 10, 3, false }, { 10, 3, true }, { 7, 4, false }, { 3, 8, false } }
    local py = [[
import sys, torch.utils.data.distributed as d
for spec in sys.argv[1:]:
    n, r, drop = spec.split(",")
    n, r = int(n), int(r)
    for rank in range(r):
        s = d.DistributedSampler(list(range(n)), num_replicas=r, rank=rank, shuffle=False, drop_last=drop == "1")
        print(" ".join(str(i + 1) for i in s))
]]
    local args = {}
    for _, c in ipairs(cases) do args[#args + 1] = string.format("%d,%d,%d", c[1], c[2], c[3] and 1 or 0) end
    local p = io.popen("/usr/bin/python3 -c '" .. py:gsub("'", "'\\''") .. "' " .. table.concat(args, " "))
    local lines = {}
    for line in p:lines() do lines[#lines + 1] = line end
    p:close()
    local k = 0
    for _, c in ipairs(cases) do
      for r = 0, c[2] - 1 do
        k = k + 1
        local got = table.concat(DS(c[1], { num_replicas = c[2], rank = r, shuffle = false, drop_last = c[3] })
          :indices(), " ")
        assert.are.equal(lines[k], got, string.format("N=%d R=%d rank=%d", c[1], c[2], r))
      end
    end
  end)
end)
