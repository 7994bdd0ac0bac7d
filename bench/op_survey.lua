-- Ops users call outside the examples, ddplua beside PyTorch in the same run: forward only, float32, one thread,
-- [1024, 1024] operands, each the median of `runs` (bench/median_ms.lua: after warm-up, every run after a full
-- collection; PyTorch's side as bench/torch_nn_ops.py times, without the collection: its tensors are freed at
-- once). It found var/std 15x, randn 8x, sin 7x and a
-- square's backward 11x slower than PyTorch (docs/performance.md, sixth session); the per-op table
-- (bench/nn_ops.lua) holds the examples' ops to their goal.
--
--   ddplua bench/op_survey.lua [runs=15] [first=N] [last=N]   (rows first..last of the table below: all by default)
local ddp = require "ddplua"
local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/op_survey.lua", { runs = 15, first = 1, last = 1000 })
ddp.set_num_threads(1)
ddp.manual_seed(0)
local F = ddp.nn.F
local x, y, p = ddp.randn(1024, 1024), ddp.randn(1024, 1024), ddp.rand(1024, 1024)
local xg = ddp.randn(1024, 1024):requires_grad_()
local perm = ddp.randperm(1024) -- 1-based positions (PyTorch's side: perm - 1)
local img = ddp.randn(8, 16, 64, 64)
local zt, wt = ddp.randn(64, 128, 8, 8), ddp.randn(128, 64, 4, 4)
local gw, gb = ddp.randn(16), ddp.randn(16)
local ints, bnd = (p * 1000):long(), ddp.randn(1024):sort()

-- name, ddplua, PyTorch (x, y, p, xg as here; torch and F imported)
local cases = {
  { "norm", function() return x:norm() end, "x.norm()" },
  { "norm dim 2", function() return x:norm(2, 2) end, "x.norm(dim=1)" },
  { "var", function() return x:var() end, "x.var()" },
  { "std dim 1", function() return x:std(1) end, "x.std(0)" },
  { "cumsum dim 2", function() return x:cumsum(2) end, "x.cumsum(1)" },
  { "topk 5 dim 2", function() return x:topk(5, 2) end, "x.topk(5, 1)" },
  { "argmax dim 2", function() return x:argmax(2) end, "x.argmax(1)" },
  { "max dim 1", function() return x:max(1) end, "x.max(0)" },
  { "min", function() return x:min() end, "x.min()" },
  { "mean dim 1", function() return x:mean(1) end, "x.mean(0)" },
  { "clamp", function() return x:clamp(-0.5, 0.5) end, "x.clamp(-0.5, 0.5)" },
  { "abs", function() return x:abs() end, "x.abs()" },
  { "exp", function() return x:exp() end, "x.exp()" },
  { "log", function() return p:log() end, "p.log()" },
  { "sqrt", function() return p:sqrt() end, "p.sqrt()" },
  { "pow 2", function() return x:pow(2) end, "x.pow(2)" },
  { "pow 2 fwd+bwd", function() xg:pow(2):sum():backward() end, "xg.pow(2).sum().backward()" },
  { "pow 3.5", function() return p:pow(3.5) end, "p.pow(3.5)" },
  { "sin", function() return x:sin() end, "x.sin()" },
  { "cos fwd+bwd", function() xg:cos():sum():backward() end, "xg.cos().sum().backward()" },
  { "where", function() return ddp.where(x:gt(0), x, y) end, "torch.where(x > 0, x, y)" },
  { "masked_fill", function() return x:masked_fill(x:lt(0), 0) end, "x.masked_fill(x < 0, 0)" },
  { "cat dim 2", function() return ddp.cat({ x, y }, 2) end, "torch.cat([x, y], 1)" },
  { "stack", function() return ddp.stack({ x, y }) end, "torch.stack([x, y])" },
  { "flip dim 2", function() return x:flip(2) end, "x.flip(1)" },
  { "softmax dim 1", function() return ddp.softmax(x, 1) end, "x.softmax(0)" },
  { "div", function() return x / y end, "x / y" },
  { "eq", function() return x:eq(y) end, "x == y" },
  { "silu", function() return F.silu(x) end, "F.silu(x)" },
  { "softplus", function() return F.softplus(x) end, "F.softplus(x)" },
  { "mse_loss", function() return ddp.mse_loss(x, y) end, "F.mse_loss(x, y)" },
  { "randn", function() return ddp.randn(1024, 1024) end, "torch.randn(1024, 1024)" },
  { "rand", function() return ddp.rand(1024, 1024) end, "torch.rand(1024, 1024)" },
  { "arange", function() return ddp.arange(1048576, { dtype = "float32" }) end, "torch.arange(1048576.)" },
  { "tril", function() return x:tril() end, "x.tril()" },
  { "einsum ij,jk (256 rows)", function() return ddp.einsum("ij,jk->ik", x:narrow(1, 1, 256), y) end,
    "torch.einsum('ij,jk->ik', x[:256], y)" },
  { "index_select dim 2", function() return x:index_select(2, perm) end, "x.index_select(1, perm - 1)" },
  { "interpolate bilinear x2", function() return F.interpolate(img, { scale_factor = 2, mode = "bilinear" }) end,
    "F.interpolate(img, scale_factor=2, mode='bilinear')" },
  { "conv_transpose2d 4x4 s2", function() return ddp.conv_transpose2d(zt, wt, nil, 2, 1) end,
    "F.conv_transpose2d(zt, wt, None, 2, 1)" },
  { "group_norm 4 groups", function() return F.group_norm(img, 4, gw, gb) end, "F.group_norm(img, 4, gw, gb)" },
  { "instance_norm", function() return F.instance_norm(img) end, "F.instance_norm(img)" },
  { "sort 1M", function() return x:reshape(-1):sort() end, "x.reshape(-1).sort()" },
  { "sort dim 2", function() return x:sort(2) end, "x.sort(1)" },
  { "cummax dim 2", function() return x:cummax(2) end, "x.cummax(1)" },
  { "cumprod dim 2", function() return x:cumprod(2) end, "x.cumprod(1)" },
  { "cumprod dim 1", function() return x:cumprod(1) end, "x.cumprod(0)" },
  { "cumsum dim 1", function() return x:cumsum(1) end, "x.cumsum(0)" },
  { "logcumsumexp dim 2", function() return x:logcumsumexp(2) end, "x.logcumsumexp(1)" },
  { "logcumsumexp fwd+bwd", function() xg:logcumsumexp(2):sum():backward() end,
    "xg.logcumsumexp(1).sum().backward()" },
  { "cumprod fwd+bwd", function() xg:cumprod(2):sum():backward() end, "xg.cumprod(1).sum().backward()" },
  { "median dim 2", function() return x:median(2) end, "x.median(1)" },
  { "quantile 0.3 dim 2", function() return x:quantile(0.3, 2) end, "x.quantile(0.3, 1)" },
  { "mode dim 2 (1000 values)", function() return ints:mode(2) end, "ints.mode(1)" },
  { "unique 1M (1000 values)", function() return ints:unique() end, "ints.unique()" },
  { "searchsorted 1M in 1024", function() return ddp.searchsorted(bnd, x) end, "torch.searchsorted(bnd, x)" },
  { "histogram 100 bins", function() return x:histogram(100) end, "x.histogram(100)" },
  { "bincount 1M (1000 values)", function() return ints:reshape(-1):bincount() end, "ints.reshape(-1).bincount()" },
  { "nonzero", function() return x:gt(0):nonzero() end, "(x > 0).nonzero()" },
  { "masked_select", function() return x:masked_select(x:gt(0)) end, "x.masked_select(x > 0)" },
  { "index_add dim 1", function() return x:index_add(1, perm, y) end, "x.index_add(0, perm - 1, y)" },
  { "transpose contiguous", function() return x:t():contiguous() end, "x.t().contiguous()" },
  { "permute to channels-last", function() return img:permute(1, 3, 4, 2):contiguous() end,
    "img.permute(0, 2, 3, 1).contiguous()" },
  { "pixel_shuffle 2", function() return F.pixel_shuffle(img, 2) end, "F.pixel_shuffle(img, 2)" },
  { "pixel_unshuffle 2", function() return F.pixel_unshuffle(img, 2) end, "F.pixel_unshuffle(img, 2)" },
  { "interpolate nearest x2", function() return F.interpolate(img, { scale_factor = 2 }) end,
    "F.interpolate(img, scale_factor=2)" },
  { "pad reflect 2", function() return F.pad(img, { 2, 2, 2, 2 }, "reflect") end,
    "F.pad(img, (2, 2, 2, 2), 'reflect')" },
  { "pad constant 2", function() return F.pad(img, { 2, 2, 2, 2 }) end, "F.pad(img, (2, 2, 2, 2))" },
}

dofile(here .. "survey_table.lua")(ddp, {
  cfg = cfg, cases = cases, title = "op (float32, 1 thread)", width = 26,
  py_setup = { "import torch.nn.functional as F",
    "x, y, p = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.rand(1024, 1024)",
    "xg = torch.randn(1024, 1024, requires_grad=True)",
    "perm, img = torch.randperm(1024) + 1, torch.randn(8, 16, 64, 64)",
    "zt, wt = torch.randn(64, 128, 8, 8), torch.randn(128, 64, 4, 4)", "gw, gb = torch.randn(16), torch.randn(16)",
    "ints, bnd = (p * 1000).long(), torch.randn(1024).sort()[0]" },
  py_row = function(i, c) return { string.format("print(%d, med(lambda: %s))", i, c[3]) } end,
  fn_of = function(c) return c[2] end,
})
