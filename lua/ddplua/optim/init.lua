-- ddplua.optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta (update loops in C, one call per parameter
-- group per step) and lr_scheduler.StepLR / CosineAnnealingLR.
local adam = require "ddplua.optim.adam"

return {
  Optimizer = require "ddplua.optim.optimizer",
  SGD = require "ddplua.optim.sgd",
  Adam = adam.Adam,
  AdamW = adam.AdamW,
  RMSprop = require "ddplua.optim.rmsprop",
  Adagrad = require "ddplua.optim.adagrad",
  Adadelta = require "ddplua.optim.adadelta",
  lr_scheduler = require "ddplua.optim.lr_scheduler",
}
