-- all_reduce results under one kind of staged stores (collectives_spec):
-- run as `DDPLUA_SHM_STAGE=<kind> ddplua --nproc N stage_kinds.lua <out>`;
-- every rank all_reduces rounding random float32/float64 tensors (sum and
-- avg; lengths around the vector widths and chunk sizes; data that starts
-- 4 or 8 bytes off a cache line, from a narrowed buffer) 20 times over, so
-- that under auto both kinds run, and rank 0 saves the results to <out>
-- (safetensors), which the spec compares bit for bit across kinds.
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group()
local rank = dist.get_rank()
local out = {}
for _, dt in ipairs { "float32", "float64" } do
  for _, op in ipairs { "sum", "avg" } do
    for _, n in ipairs { 1, 15, 17, 4099, 65537, 1000003 } do
      for _, skip in ipairs { 0, 1 } do
        ddp.manual_seed(1000 * rank + n + skip)
        local x = ddp.randn(n + skip, { dtype = dt }):mul(1e3)
        for rep = 1, (n >= 65537 and 10 or 1) do
          local t = x:clone():narrow(1, 1 + skip, n)
          dist.all_reduce(t, op)
          if rep == 1 then out[string.format("%s_%s_%d_%d", dt, op, n, skip)] = t:clone() end
        end
      end
    end
  end
end
if rank == 0 then ddp.save(out, arg[1]) end
dist.destroy_process_group()
