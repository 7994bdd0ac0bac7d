-- ddplua.nn: modules (one file each, or one per family as in PyTorch),
-- nn.F (functional forms) and nn.init (initialisers).
local activation = require "ddplua.nn.activation"
local batchnorm = require "ddplua.nn.batchnorm"
local container = require "ddplua.nn.container"
local loss = require "ddplua.nn.loss"
local loss_more = require "ddplua.nn.loss_more"
local pooling = require "ddplua.nn.pooling"
local rnn = require "ddplua.nn.rnn"
local transformer = require "ddplua.nn.transformer"

local nn = {
  Module = require "ddplua.nn.module",
  Sequential = container.Sequential,
  ModuleList = container.ModuleList,
  ModuleDict = container.ModuleDict,
  Identity = activation.Identity,
  Linear = require "ddplua.nn.linear",
  Conv2d = require "ddplua.nn.conv",
  ConvTranspose2d = require "ddplua.nn.conv_transpose",
  MaxPool2d = pooling.MaxPool2d,
  AvgPool2d = pooling.AvgPool2d,
  AdaptiveAvgPool2d = require "ddplua.nn.adaptive_pool",
  RNN = rnn.RNN,
  LSTM = rnn.LSTM,
  GRU = rnn.GRU,
  MultiheadAttention = require "ddplua.nn.attention",
  TransformerEncoderLayer = transformer.TransformerEncoderLayer,
  TransformerEncoder = transformer.TransformerEncoder,
  BatchNorm1d = batchnorm.BatchNorm1d,
  BatchNorm2d = batchnorm.BatchNorm2d,
  BatchNorm3d = batchnorm.BatchNorm3d,
  SyncBatchNorm = require "ddplua.nn.syncbatchnorm",
  Dropout = require "ddplua.nn.dropout",
  Dropout2d = require("ddplua.nn.dropout2d").Dropout2d,
  Dropout3d = require("ddplua.nn.dropout2d").Dropout3d,
  Flatten = require "ddplua.nn.flatten",
  Embedding = require "ddplua.nn.embedding",
  LayerNorm = require "ddplua.nn.layernorm",
  CrossEntropyLoss = loss.CrossEntropyLoss,
  NLLLoss = loss.NLLLoss,
  MSELoss = loss.MSELoss,
  BCELoss = loss_more.BCELoss,
  BCEWithLogitsLoss = loss_more.BCEWithLogitsLoss,
  L1Loss = loss_more.L1Loss,
  SmoothL1Loss = loss_more.SmoothL1Loss,
  HuberLoss = loss_more.HuberLoss,
  KLDivLoss = loss_more.KLDivLoss,
  F = require "ddplua.nn.functional",
  init = require "ddplua.nn.initializers",
  utils = require "ddplua.nn.utils",
}
for name, cls in pairs(activation.modules) do nn[name] = cls end -- ReLU, GELU, ... (activation.lua)
-- TransformerDecoderLayer, TransformerDecoder, Transformer (not a family: they need nn.F loaded first)
for name, cls in pairs(require("ddplua.nn.transformer_decoder").modules) do nn[name] = cls end
-- the families that bring their modules in a table (nn/families.lua; their functional forms are in nn.F)
for _, family in ipairs(require "ddplua.nn.families") do
  for name, cls in pairs(require(family).modules) do nn[name] = cls end
end
-- The library's own module classes, marked for nn.Sequential (rawly: a user's subclass or a class of the user's own is
-- not marked): their forwards keep no reference to their input or output and return a new tensor or their input,
-- so Sequential frees an output between two of them once the next has read it (container.lua)
for _, cls in pairs(nn) do
  if type(cls) == "table" and rawget(cls, "super") ~= nil and cls.forward then rawset(cls, "_library_module", true) end
end

return nn
