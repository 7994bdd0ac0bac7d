-- The weight gradient of grayscale first layers (one input channel, up to
-- 5x5), cpu_conv_narrow_grad_w.c against the path it replaced (im2col +
-- GEMM per image; `core.set_conv_narrow_grad(false)`), both
-- in the same process, alternated `reps` times, ms (median of `runs`): the
-- backward of y = conv2d(x, w, b) for w and b only (x is data), as in a
-- network's first layer, and with x's gradient too.
--
--   ./build/bin/ddplua bench/conv_narrow_grad_w.lua [runs=30] [reps=3] [threads=1]
local ddp = require "ddplua"
local core, F = ddp.core, ddp.nn.F

local cfg = { runs = 30, reps = 3, threads = 1 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(%d+)$")
  if not k or cfg[k] == nil then error("usage: ddplua bench/conv_narrow_grad_w.lua [runs=N] [reps=N] [threads=N], got " .. a, 0) end
  cfg[k] = math.tointeger(tonumber(v))
end
ddp.set_num_threads(cfg.threads)
ddp.manual_seed(0)
local median_of = dofile((arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "") .. "median_ms.lua")
print(string.format("cpu: %s | %d thread(s)", core.cpu_info(), cfg.threads))

local shapes = {
  { "Fashion-MNIST CNN conv1 [64,1,28,28] -> 32 3x3 pad 1", { 64, 1, 28, 28 }, 32, 3, 1 },
  { "LeNet conv1 [64,1,28,28] -> 6 5x5", { 64, 1, 28, 28 }, 6, 5, 0 },
  { "odd sizes [7,1,31,45] -> 5 3x3 pad (2, 1) dil 2", { 7, 1, 31, 45 }, 5, 3, { 2, 1 }, 2 },
}
local fmt = "%-52s %12s %12s %12s %12s"
print(string.format(fmt, "layer", "w,b: new", "old", "x,w,b: new", "old"))
for _, s in ipairs(shapes) do
  local name, xs, o, k, pad, dil = table.unpack(s)
  local x = ddp.randn(table.unpack(xs))
  local xg = x:clone():requires_grad_()
  local w = ddp.randn(o, xs[2], k, k):mul_(0.1):requires_grad_()
  local b = ddp.zeros(o):requires_grad_()
  local y0 = F.conv2d(x, w, b, 1, pad, dil)
  local g = ddp.randn(table.unpack(y0:size()))
  local function wb() F.conv2d(x, w, b, 1, pad, dil):backward(g); w.grad, b.grad = nil, nil end
  local function all() F.conv2d(xg, w, b, 1, pad, dil):backward(g); w.grad, b.grad, xg.grad = nil, nil, nil end
  local res = { {}, {}, {}, {} }
  for _ = 1, cfg.reps do
    for i, on in ipairs({ true, false }) do
      core.set_conv_narrow_grad(on)
      table.insert(res[i], median_of(ddp, cfg.runs, wb))
      table.insert(res[i + 2], median_of(ddp, cfg.runs, all))
    end
  end
  core.set_conv_narrow_grad(true)
  local function m(t) table.sort(t); return string.format("%.3f", t[(#t + 1) // 2]) end
  print(string.format(fmt, name, m(res[1]), m(res[2]), m(res[3]), m(res[4])))
end
