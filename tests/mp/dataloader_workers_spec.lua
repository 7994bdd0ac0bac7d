-- DataLoader{num_workers = 2} under `ddplua --nproc 2` (issue 14): every
-- rank forks its own workers, and each rank's batches (a Lua dataset, a
-- DistributedSampler, two epochs) are those it gets with num_workers = 0;
-- the ranks' shards together cover the dataset; no worker is left behind.
local U = require "helpers.io_util"

local SCRIPT = [[
local ddp = require "ddplua"
local data, dist = ddp.data, ddp.distributed
dist.init_process_group()
local ds = setmetatable({ n = 45, get = function(_, i) return ddp.full({ 3 }, i * 1.5), i end },
  { __len = function(s) return s.n end })
local function epochs(nw)
  local sampler = data.DistributedSampler(ds, { shuffle = true, seed = 7 })
  local o = { batch_size = 4, sampler = sampler }
  if nw > 0 then o.num_workers = nw end
  local loader = data.DataLoader(ds, o)
  local out = {}
  for epoch = 1, 2 do
    sampler:set_epoch(epoch)
    for x, y in loader:iter() do
      out[#out + 1] = table.concat(y:totable(), ",") .. ":" .. x:sum():item()
    end
  end
  return table.concat(out, " ")
end
local plain, workers = epochs(0), epochs(2)
print("SAME", plain == workers)
print("ITEMS", plain)
local kids = io.popen("ps -o pid= --ppid " .. ddp.core.getpid()):read("a")
local n = 0
for _ in kids:gmatch("%d+") do n = n + 1 end
print("CHILDREN", n - 1) -- the ps itself
dist.destroy_process_group()
]]

describe("DataLoader workers under --nproc 2", function()
  it("give each rank its num_workers = 0 batches, and the shards cover the dataset", function()
    local dir = U.tmpdir()
    U.write(dir .. "/w.lua", SCRIPT)
    local ok, out = U.run(U.quote(U.ddplua) .. " --nproc 2 " .. U.quote(dir .. "/w.lua"))
    U.rm_rf(dir)
    assert.is_true(ok, out)
    for r = 0, 1 do
      assert.matches("%[rank " .. r .. "%] SAME\ttrue", out)
      assert.matches("%[rank " .. r .. "%] CHILDREN\t0", out)
    end
    local seen = {}
    for items in out:gmatch("%] ITEMS\t([^\n]*)") do
      local epoch1 = 0
      for batch in items:gmatch("[^ ]+") do
        epoch1 = epoch1 + 1
        if epoch1 > 6 then break end -- 23 items per rank = 6 batches in the first epoch
        for i in batch:match("^([^:]*)"):gmatch("%d+") do seen[tonumber(i)] = true end
      end
    end
    for i = 1, 45 do assert.is_true(seen[i], "item " .. i .. " is in no rank's first epoch") end
  end)
end)
