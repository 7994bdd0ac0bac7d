-- oneDNN's direct against its Winograd convolutions (cpu_dnnl_conv_prim.c's
-- use_winograd), forward + both backwards of 3x3 stride-1 padded conv2d at
-- the shapes of the examples and of ResNet, in the same run (alternated),
-- the best of `reps` timings of 3 calls, at `threads` threads.
--   ./build/bin/ddplua bench/conv_algos.lua [threads=1] [reps=5]
local ddp = require "ddplua"
local core = ddp.core

local cfg = { threads = 1, reps = 5 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(%d+)$")
  if not k or cfg[k] == nil then error("usage: ddplua bench/conv_algos.lua [threads=N] [reps=N], got " .. a, 0) end
  cfg[k] = tonumber(v)
end
ddp.set_num_threads(cfg.threads)
print(core.cpu_info and core.cpu_info() or "", core.onednn_info())

-- batch, in channels, out channels, height = width
local shapes = { { 64, 32, 64, 14 }, { 64, 64, 64, 7 }, { 64, 32, 32, 4 }, { 64, 16, 16, 8 }, { 64, 16, 16, 16 },
  { 64, 16, 16, 32 }, { 32, 64, 64, 56 }, { 32, 128, 128, 28 }, { 32, 256, 256, 14 }, { 32, 512, 512, 7 } }

local function time_ms(x, w, g)
  local best = math.huge
  for _ = 1, cfg.reps do
    local t0 = ddp.clock()
    for _ = 1, 3 do ddp.conv2d(x, w, nil, 1, 1):backward(g) end
    best = math.min(best, (ddp.clock() - t0) / 3)
  end
  return best * 1e3
end

print(string.format("%-26s %10s %10s %8s %8s", "shape (3x3, pad 1)", "direct ms", "wino ms", "ratio", "wino?"))
for _, s in ipairs(shapes) do
  local n, c, o, h = table.unpack(s)
  local x, w = ddp.randn(n, c, h, h):requires_grad_(), ddp.randn(o, c, 3, 3):requires_grad_()
  local g = ddp.randn(n, o, h, h)
  local was = core.set_conv_winograd(false)
  time_ms(x, w, g) -- primitives made, caches warm
  core.set_conv_winograd(true)
  local before = core._onednn_winograd_calls()
  time_ms(x, w, g)
  local used = core._onednn_winograd_calls() > before
  local d, wg = math.huge, math.huge
  for _ = 1, 2 do
    core.set_conv_winograd(false)
    d = math.min(d, time_ms(x, w, g))
    core.set_conv_winograd(true)
    wg = math.min(wg, time_ms(x, w, g))
  end
  core.set_conv_winograd(was)
  print(string.format("%-26s %10.3f %10.3f %7.2fx %8s", string.format("n%d %d->%d %dx%d", n, c, o, h, h), d, wg,
    d / wg, used and "yes" or "no"))
end
