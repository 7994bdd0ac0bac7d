-- Copies of permuted views into contiguous tensors (src/backends/cpu/cpu_copy_permute.c), ddplua beside PyTorch in
-- the same run: float32, one thread, each the median of `runs` (bench/survey_table.lua). The shapes are the
-- layouts models move between: channels-last and back, PixelShuffle's two orders, batches of transposes, a
-- transpose with a short side.
--
--   ddplua bench/permute_copy.lua [runs=15] [first=N] [last=N]
local ddp = require "ddplua"
local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/permute_copy.lua", { runs = 15, first = 1, last = 1000 })
ddp.set_num_threads(1)
ddp.manual_seed(0)

local SHAPES = { -- shape, permutation (1-based)
  { { 32, 64, 56, 56 }, { 1, 3, 4, 2 } }, { { 32, 56, 56, 64 }, { 1, 4, 2, 3 } },
  { { 32, 64, 2, 2, 32, 32 }, { 1, 2, 5, 3, 6, 4 } }, { { 32, 64, 32, 2, 32, 2 }, { 1, 2, 4, 6, 3, 5 } },
  { { 256, 10, 1000 }, { 1, 3, 2 } }, { { 1000, 10, 256 }, { 3, 2, 1 } }, { { 2048, 2048 }, { 2, 1 } },
  { { 64, 12, 3, 4096 }, { 1, 4, 2, 3 } }, { { 512, 4, 512 }, { 1, 3, 2 } }, { { 64, 128, 8, 64 }, { 1, 3, 2, 4 } },
  { { 16, 4, 128, 32 }, { 1, 3, 2, 4 } }, { { 16, 128, 4, 32 }, { 1, 3, 2, 4 } }, -- the GPT heads merged, split
}
local cases, py_setup = {}, {}
for i, s in ipairs(SHAPES) do
  local x = ddp.randn(table.unpack(s[1]))
  local zero = {}
  for k, d in ipairs(s[2]) do zero[k] = d - 1 end
  cases[i] = { table.concat(s[1], "x") .. " (" .. table.concat(s[2], ",") .. ")",
    function() return x:permute(table.unpack(s[2])):contiguous() end,
    string.format("x%d.permute(%s).contiguous()", i, table.concat(zero, ", ")) }
  py_setup[i] = string.format("x%d = torch.randn(%s)", i, table.concat(s[1], ", "))
end

dofile(here .. "survey_table.lua")(ddp, {
  cfg = cfg, cases = cases, title = "permute(...):contiguous()", width = 34, py_setup = py_setup,
  py_row = function(i, c) return { string.format("print(%d, med(lambda: %s))", i, c[3]) } end,
  fn_of = function(c) return c[2] end,
})
