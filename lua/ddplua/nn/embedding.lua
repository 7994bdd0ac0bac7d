-- nn.Embedding(num_embeddings, embedding_dim [, ...]): a lookup table of
-- N(0, 1) rows; ids are int64 positions 1..num_embeddings. PyTorch's other
-- settings, positionally (padding_idx, max_norm, norm_type,
-- scale_grad_by_freq, sparse, _weight, device, dtype) or as one table:
-- device=, dtype= and padding_idx= work (padding_idx: a 1-based row, or
-- negative from the end as in PyTorch; that row starts as zeros and never
-- gets a gradient); max_norm, scale_grad_by_freq and sparse are not
-- implemented and are errors when set.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"

local Embedding = Module:extend("Embedding")

local SETTINGS = { "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse", "_weight", "device",
  "dtype" }

function Embedding:__init(num_embeddings, embedding_dim, ...)
  local opts = util.args("Embedding", SETTINGS, ...)
  util.unsupported("Embedding", "max_norm", opts.max_norm, nil, "rows are never renormalised")
  util.unsupported("Embedding", "scale_grad_by_freq", opts.scale_grad_by_freq, false, "gradients are not rescaled")
  util.unsupported("Embedding", "sparse", opts.sparse, false, "gradients are dense")
  util.unsupported("Embedding", "_weight", opts._weight, nil, "assign m.weight after construction")
  self.num_embeddings = util.check_int("Embedding", "num_embeddings", num_embeddings)
  self.embedding_dim = util.check_int("Embedding", "embedding_dim", embedding_dim)
  local pad = opts.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > self.num_embeddings or pad < -self.num_embeddings then
      E.raise(string.format("Embedding: padding_idx must be an integer in 1..%d or -%d..-1, got %s",
        self.num_embeddings, self.num_embeddings, tostring(pad)))
    end
    if pad < 0 then pad = self.num_embeddings + 1 + pad end
  end
  self.padding_idx = pad
  self:register_parameter("weight", util.parameter(function()
    local w = init.normal_(ddp.empty(num_embeddings, embedding_dim, util.tensor_opts(opts)))
    if pad then w[pad]:zero_() end
    return w
  end))
end

function Embedding:forward(ids)
  if not ddp.is_tensor(ids) or ids:dtype() ~= "int64" then
    E.raise(string.format("%s: expected an int64 tensor of ids 1..%d, got %s", tostring(self), self.num_embeddings,
      ddp.is_tensor(ids) and ids:dtype() .. " tensor" or type(ids)))
  end
  return ddp.embedding(ids, self.weight, self.padding_idx)
end

function Embedding:extra_repr()
  local s = string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  return self.padding_idx and s .. string.format(", padding_idx=%d", self.padding_idx) or s
end

return Embedding
