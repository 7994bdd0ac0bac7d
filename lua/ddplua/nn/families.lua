-- The families of modules that bring their modules and functional forms in one table each, {modules =, F =}:
-- GroupNorm and InstanceNorm2d (norm_more.lua), interpolate, Upsample and pixel_shuffle (resample.lua), padding
-- (padding.lua), the RNN cells and the 1-d convolutions and pools (cells.lua), the softmax modules, GLU, PReLU,
-- Unflatten, the similarities, normalize, one_hot and Parameter (layers_more.lua), the adaptive pools beside
-- AdaptiveAvgPool2d (adaptive_more.lua), the pair, ranking, margin and likelihood losses (loss_pairs.lua), Unfold
-- and Fold (fold.lua), Bilinear, LocalResponseNorm and ChannelShuffle (bilinear_lrn_shuffle.lua), affine_grid and
-- grid_sample (grid_sample.lua), the 3-d convolutions and pools (volumetric.lua), CTCLoss (loss_ctc.lua).
-- nn/init.lua merges their modules into nn, nn/functional.lua their functional forms into nn.F. (The Transformer's
-- decoder is not a family: it needs nn.F loaded first; nn/init.lua adds it.)
return { "ddplua.nn.norm_more", "ddplua.nn.resample", "ddplua.nn.padding", "ddplua.nn.cells", "ddplua.nn.layers_more",
  "ddplua.nn.adaptive_more", "ddplua.nn.loss_pairs", "ddplua.nn.fold",
  "ddplua.nn.bilinear_lrn_shuffle", "ddplua.nn.grid_sample", "ddplua.nn.volumetric",
  "ddplua.nn.loss_ctc" }
