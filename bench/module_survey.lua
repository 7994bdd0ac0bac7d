-- The nn modules beyond the examples, forward and backward, ddplua beside PyTorch in the same run: float32, one
-- thread, a batch of a model's size, each the median of `runs` (bench/median_ms.lua on ddplua's side, the same
-- timing in Python on PyTorch's). A step is the module on its input, the output's sum, its backward (for a loss:
-- the loss's backward). It found nn.EmbeddingBag's "max" mode 200x slower than PyTorch's, forward and backward
-- (a narrow and max per bag; docs/performance.md, third 2026-12-07 session).
--
--   ddplua bench/module_survey.lua [runs=9] [first=N] [last=N]
local ddp = require "ddplua"
local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/module_survey.lua", { runs = 9, first = 1, last = 1000 })
ddp.set_num_threads(1)
ddp.manual_seed(0)
local nn = ddp.nn

local function leaf(...) return ddp.randn(...):requires_grad_() end
-- one step of module m on x: its output summed, backward
local function step(m, x) return function() m(x):sum():backward() end end
local function loss_step(m, x, y) return function() m(x, y):backward() end end

-- name, ddplua set-up returning the step, PyTorch set-up (Python statements defining f, the step)
local cases = {
  { "Conv1d 64->64 k3 [32,64,256]", function() return step(nn.Conv1d(64, 64, 3, 1, 1), leaf(32, 64, 256)) end,
    "m = nn.Conv1d(64, 64, 3, 1, 1); x = leaf(32, 64, 256); f = step(m, x)" },
  { "ConvTranspose1d 64->32 k4 s2", function() return step(nn.ConvTranspose1d(64, 32, 4, 2, 1), leaf(32, 64, 128)) end,
    "m = nn.ConvTranspose1d(64, 32, 4, 2, 1); x = leaf(32, 64, 128); f = step(m, x)" },
  { "MaxPool1d 2 [32,64,256]", function() return step(nn.MaxPool1d(2), leaf(32, 64, 256)) end,
    "m = nn.MaxPool1d(2); x = leaf(32, 64, 256); f = step(m, x)" },
  { "AdaptiveMaxPool2d 7 [32,64,28,28]", function() return step(nn.AdaptiveMaxPool2d(7), leaf(32, 64, 28, 28)) end,
    "m = nn.AdaptiveMaxPool2d(7); x = leaf(32, 64, 28, 28); f = step(m, x)" },
  { "AdaptiveAvgPool2d 7 [32,64,28,28]", function() return step(nn.AdaptiveAvgPool2d(7), leaf(32, 64, 28, 28)) end,
    "m = nn.AdaptiveAvgPool2d(7); x = leaf(32, 64, 28, 28); f = step(m, x)" },
  { "GroupNorm 8 [32,64,28,28]", function() return step(nn.GroupNorm(8, 64), leaf(32, 64, 28, 28)) end,
    "m = nn.GroupNorm(8, 64); x = leaf(32, 64, 28, 28); f = step(m, x)" },
  { "InstanceNorm2d [32,64,28,28]", function() return step(nn.InstanceNorm2d(64), leaf(32, 64, 28, 28)) end,
    "m = nn.InstanceNorm2d(64); x = leaf(32, 64, 28, 28); f = step(m, x)" },
  { "ReflectionPad2d 2 [32,16,64,64]", function() return step(nn.ReflectionPad2d(2), leaf(32, 16, 64, 64)) end,
    "m = nn.ReflectionPad2d(2); x = leaf(32, 16, 64, 64); f = step(m, x)" },
  { "ReplicationPad2d 2", function() return step(nn.ReplicationPad2d(2), leaf(32, 16, 64, 64)) end,
    "m = nn.ReplicationPad2d(2); x = leaf(32, 16, 64, 64); f = step(m, x)" },
  { "PixelShuffle 2 [32,64,32,32]", function() return step(nn.PixelShuffle(2), leaf(32, 64, 32, 32)) end,
    "m = nn.PixelShuffle(2); x = leaf(32, 64, 32, 32); f = step(m, x)" },
  { "Upsample nearest x2", function() return step(nn.Upsample({ scale_factor = 2 }), leaf(32, 16, 64, 64)) end,
    "m = nn.Upsample(scale_factor=2); x = leaf(32, 16, 64, 64); f = step(m, x)" },
  { "Upsample bilinear x2", function()
    return step(nn.Upsample({ scale_factor = 2, mode = "bilinear", align_corners = false }), leaf(32, 16, 64, 64))
  end, "m = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=False); x = leaf(32, 16, 64, 64); " ..
    "f = step(m, x)" },
  { "GRU 128 [50,32,128]", function() return function() local y = nn.GRU(128, 128)(leaf(50, 32, 128)); y:sum():backward() end end,
    "m = nn.GRU(128, 128); x = leaf(50, 32, 128)\ndef f(): m(x)[0].sum().backward()" },
  { "LSTM 2 layers bidirectional 256 [35,20,128]", function()
    local m, x = nn.LSTM(128, 256, { num_layers = 2, bidirectional = true }), leaf(35, 20, 128)
    return function() local y = m(x); y:sum():backward() end
  end, "m = nn.LSTM(128, 256, num_layers=2, bidirectional=True); x = leaf(35, 20, 128)\n" ..
    "def f(): m(x)[0].sum().backward()" },
  { "MultiheadAttention 256/8 [32,64]", function()
    local m, x = nn.MultiheadAttention(256, 8, { batch_first = true }), leaf(32, 64, 256)
    return function() local y = m(x, x, x); y:sum():backward() end
  end, "m = nn.MultiheadAttention(256, 8, batch_first=True); x = leaf(32, 64, 256)\n" ..
    "def f(): m(x, x, x)[0].sum().backward()" },
  { "TransformerEncoderLayer 256", function()
    return step(nn.TransformerEncoderLayer(256, 8, 1024, 0.0, { batch_first = true }), leaf(32, 64, 256))
  end, "m = nn.TransformerEncoderLayer(256, 8, 1024, 0.0, batch_first=True); x = leaf(32, 64, 256); f = step(m, x)" },
  { "EmbeddingBag max [1000 bags of 50]", function()
    local m = nn.EmbeddingBag(10000, 64, { mode = "max" })
    local ids = ddp.randint(1, 10001, { 1000, 50 })
    return function() m(ids):sum():backward() end
  end, "m = nn.EmbeddingBag(10000, 64, mode='max'); ids = torch.randint(0, 10000, (1000, 50))\n" ..
    "def f(): m(ids).sum().backward()" },
  { "EmbeddingBag mean, offsets", function()
    local m = nn.EmbeddingBag(10000, 64, { mode = "mean" })
    local ids, offs = ddp.randint(1, 10001, { 50000 }), ddp.arange(0, 1000):long() * 50 + 1
    offs[2] = 30 -- bags of unequal length
    return function() m(ids, offs):sum():backward() end
  end, "m = nn.EmbeddingBag(10000, 64, mode='mean'); ids = torch.randint(0, 10000, (50000,))\n" ..
    "offs = torch.arange(0, 1000) * 50; offs[1] = 29\ndef f(): m(ids, offs).sum().backward()" },
  { "CrossEntropyLoss smoothing [512,1000]", function()
    return loss_step(nn.CrossEntropyLoss({ label_smoothing = 0.1 }), leaf(512, 1000), ddp.randint(1, 1001, { 512 }))
  end, "m = nn.CrossEntropyLoss(label_smoothing=0.1); x = leaf(512, 1000); y = torch.randint(0, 1000, (512,))\n" ..
    "def f(): m(x, y).backward()" },
  { "KLDivLoss batchmean [512,1000]", function()
    return loss_step(nn.KLDivLoss({ reduction = "batchmean" }), leaf(512, 1000), ddp.rand(512, 1000))
  end, "m = nn.KLDivLoss(reduction='batchmean'); x = leaf(512, 1000); y = torch.rand(512, 1000)\n" ..
    "def f(): m(x, y).backward()" },
  { "SmoothL1Loss [1024,1024]", function() return loss_step(nn.SmoothL1Loss(), leaf(1024, 1024), ddp.randn(1024, 1024)) end,
    "m = nn.SmoothL1Loss(); x = leaf(1024, 1024); y = torch.randn(1024, 1024)\ndef f(): m(x, y).backward()" },
  { "BCEWithLogitsLoss [1024,1024]", function()
    return loss_step(nn.BCEWithLogitsLoss(), leaf(1024, 1024), ddp.rand(1024, 1024))
  end, "m = nn.BCEWithLogitsLoss(); x = leaf(1024, 1024); y = torch.rand(1024, 1024)\ndef f(): m(x, y).backward()" },
  { "TripletMarginLoss [4096,256]", function()
    local m, a, p, n = nn.TripletMarginLoss(), leaf(4096, 256), leaf(4096, 256), leaf(4096, 256)
    return function() m(a, p, n):backward() end
  end, "m = nn.TripletMarginLoss(); a, p, n = leaf(4096, 256), leaf(4096, 256), leaf(4096, 256)\n" ..
    "def f(): m(a, p, n).backward()" },
  { "CosineSimilarity [4096,256]", function()
    local m, a, b = nn.CosineSimilarity(), leaf(4096, 256), leaf(4096, 256)
    return function() m(a, b):sum():backward() end
  end, "m = nn.CosineSimilarity(); a, b = leaf(4096, 256), leaf(4096, 256)\ndef f(): m(a, b).sum().backward()" },
  { "MultiMarginLoss [512,1000]", function()
    return loss_step(nn.MultiMarginLoss(), leaf(512, 1000), ddp.randint(1, 1001, { 512 }))
  end, "m = nn.MultiMarginLoss(); x = leaf(512, 1000); y = torch.randint(0, 1000, (512,))\n" ..
    "def f(): m(x, y).backward()" },
  { "Mish [1024,1024]", function() return step(nn.Mish(), leaf(1024, 1024)) end,
    "m = nn.Mish(); x = leaf(1024, 1024); f = step(m, x)" },
  { "Hardswish [1024,1024]", function() return step(nn.Hardswish(), leaf(1024, 1024)) end,
    "m = nn.Hardswish(); x = leaf(1024, 1024); f = step(m, x)" },
  { "PReLU [32,64,28,28]", function() return step(nn.PReLU(64), leaf(32, 64, 28, 28)) end,
    "m = nn.PReLU(64); x = leaf(32, 64, 28, 28); f = step(m, x)" },
  { "LogSigmoid [1024,1024]", function() return step(nn.LogSigmoid(), leaf(1024, 1024)) end,
    "m = nn.LogSigmoid(); x = leaf(1024, 1024); f = step(m, x)" },
  -- building blocks of model families beyond the examples: MobileNet's depthwise and pointwise convolutions,
  -- ResNeXt's grouped one, a dilated one (DeepLab), ViT's patch embedding, BERT's padded encoder layer
  { "Conv2d depthwise 3x3 [32,64,56,56]", function()
    return step(nn.Conv2d(64, 64, 3, { padding = 1, groups = 64 }), leaf(32, 64, 56, 56))
  end, "m = nn.Conv2d(64, 64, 3, padding=1, groups=64); x = leaf(32, 64, 56, 56); f = step(m, x)" },
  { "Conv2d depthwise 7x7 [32,96,28,28]", function()
    return step(nn.Conv2d(96, 96, 7, { padding = 3, groups = 96 }), leaf(32, 96, 28, 28))
  end, "m = nn.Conv2d(96, 96, 7, padding=3, groups=96); x = leaf(32, 96, 28, 28); f = step(m, x)" },
  { "Conv2d 1x1 64->128 [32,64,28,28]", function() return step(nn.Conv2d(64, 128, 1), leaf(32, 64, 28, 28)) end,
    "m = nn.Conv2d(64, 128, 1); x = leaf(32, 64, 28, 28); f = step(m, x)" },
  { "Conv2d groups=32 3x3 128 [16,128,28,28]", function()
    return step(nn.Conv2d(128, 128, 3, { padding = 1, groups = 32 }), leaf(16, 128, 28, 28))
  end, "m = nn.Conv2d(128, 128, 3, padding=1, groups=32); x = leaf(16, 128, 28, 28); f = step(m, x)" },
  { "Conv2d dilation 2 64 [16,64,28,28]", function()
    return step(nn.Conv2d(64, 64, 3, { padding = 2, dilation = 2 }), leaf(16, 64, 28, 28))
  end, "m = nn.Conv2d(64, 64, 3, padding=2, dilation=2); x = leaf(16, 64, 28, 28); f = step(m, x)" },
  { "ViT patches Conv2d 3->192 k4 s4 [64,3,32,32]", function()
    return step(nn.Conv2d(3, 192, 4, { stride = 4 }), leaf(64, 3, 32, 32))
  end, "m = nn.Conv2d(3, 192, 4, stride=4); x = leaf(64, 3, 32, 32); f = step(m, x)" },
  { "TransformerEncoderLayer 256, key padding", function()
    local m, x = nn.TransformerEncoderLayer(256, 8, 1024, 0.0, { batch_first = true }), leaf(32, 64, 256)
    local pad = ddp.arange(1, 65):view(1, 64):expand(32, 64):gt(ddp.randint(32, 65, { 32, 1 }))
    return function() m(x, nil, pad):sum():backward() end
  end, "m = nn.TransformerEncoderLayer(256, 8, 1024, 0.0, batch_first=True); x = leaf(32, 64, 256)\n" ..
    "pad = torch.arange(64).view(1, 64).expand(32, 64) >= torch.randint(32, 65, (32, 1))\n" ..
    "def f(): m(x, src_key_padding_mask=pad).sum().backward()" },
  { "BatchNorm1d 512 [256,512]", function() return step(nn.BatchNorm1d(512), leaf(256, 512)) end,
    "m = nn.BatchNorm1d(512); x = leaf(256, 512); f = step(m, x)" },
  { "Embedding 50000x256 [32,128] ids", function()
    local m, ids = nn.Embedding(50000, 256), ddp.randint(1, 50001, { 32, 128 })
    return function() m(ids):sum():backward() end
  end, "m = nn.Embedding(50000, 256); ids = torch.randint(0, 50000, (32, 128))\ndef f(): m(ids).sum().backward()" },
}
dofile(here .. "survey_table.lua")(ddp, {
  cfg = cfg, cases = cases, title = "module, forward + backward (1 thread)", width = 38,
  py_setup = { "import torch.nn as nn", "def leaf(*s): return torch.randn(*s).requires_grad_()",
    "def step(m, x):", "    def f(): m(x).sum().backward()", "    return f" },
  py_row = function(i, c)
    local lines = { "def case" .. i .. "():" }
    for line in (c[3] .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = "    " .. line end
    lines[#lines + 1] = "    return f"
    lines[#lines + 1] = string.format("print(%d, med(case%d()), flush=True)", i, i)
    return lines
  end,
  fn_of = function(c) return c[2]() end,
})
