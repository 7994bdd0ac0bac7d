-- ddplua.optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta (update loops in C, one call per parameter
-- group per step), Adamax, NAdam, RAdam (composed from the tensor ops, optim/composed.lua) and lr_scheduler.
local adam = require "ddplua.optim.adam"
local composed = require "ddplua.optim.composed"

return {
  Optimizer = require "ddplua.optim.optimizer",
  SGD = require "ddplua.optim.sgd",
  Adam = adam.Adam,
  AdamW = adam.AdamW,
  RMSprop = require "ddplua.optim.rmsprop",
  Adagrad = require "ddplua.optim.adagrad",
  Adadelta = require "ddplua.optim.adadelta",
  Adamax = composed.Adamax, -- these three composed from the tensor ops (optim/composed.lua)
  NAdam = composed.NAdam,
  RAdam = composed.RAdam,
  lr_scheduler = require "ddplua.optim.lr_scheduler",
}
