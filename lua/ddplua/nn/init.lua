-- ddplua.nn: modules (one file each, or one per family as in PyTorch),
-- nn.F (functional forms) and nn.init (initialisers).
local activation = require "ddplua.nn.activation"
local batchnorm = require "ddplua.nn.batchnorm"
local container = require "ddplua.nn.container"
local loss = require "ddplua.nn.loss"
local pooling = require "ddplua.nn.pooling"

local nn = {
  Module = require "ddplua.nn.module",
  Sequential = container.Sequential,
  ModuleList = container.ModuleList,
  ModuleDict = container.ModuleDict,
  Identity = activation.Identity,
  Linear = require "ddplua.nn.linear",
  Conv2d = require "ddplua.nn.conv",
  MaxPool2d = pooling.MaxPool2d,
  AvgPool2d = pooling.AvgPool2d,
  BatchNorm1d = batchnorm.BatchNorm1d,
  BatchNorm2d = batchnorm.BatchNorm2d,
  SyncBatchNorm = require "ddplua.nn.syncbatchnorm",
  Dropout = require "ddplua.nn.dropout",
  Flatten = require "ddplua.nn.flatten",
  Embedding = require "ddplua.nn.embedding",
  LayerNorm = require "ddplua.nn.layernorm",
  CrossEntropyLoss = loss.CrossEntropyLoss,
  MSELoss = loss.MSELoss,
  F = require "ddplua.nn.functional",
  init = require "ddplua.nn.initializers",
}
for name, cls in pairs(activation.modules) do nn[name] = cls end -- ReLU, GELU, ... (activation.lua)

return nn
