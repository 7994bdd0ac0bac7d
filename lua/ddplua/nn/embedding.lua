-- nn.Embedding(num_embeddings, embedding_dim [, ...]): a lookup table of
-- N(0, 1) rows; ids are int64 positions 1..num_embeddings. PyTorch's other
-- settings, positionally (padding_idx, max_norm, norm_type,
-- scale_grad_by_freq, sparse, _weight, device, dtype) or as one table:
-- device= and dtype= work; padding_idx, max_norm, scale_grad_by_freq and
-- sparse are not implemented and are errors when set.
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
  util.unsupported("Embedding", "padding_idx", opts.padding_idx, nil, "rows are never masked")
  util.unsupported("Embedding", "max_norm", opts.max_norm, nil, "rows are never renormalised")
  util.unsupported("Embedding", "scale_grad_by_freq", opts.scale_grad_by_freq, false, "gradients are not rescaled")
  util.unsupported("Embedding", "sparse", opts.sparse, false, "gradients are dense")
  util.unsupported("Embedding", "_weight", opts._weight, nil, "assign m.weight after construction")
  self.num_embeddings = util.check_int("Embedding", "num_embeddings", num_embeddings)
  self.embedding_dim = util.check_int("Embedding", "embedding_dim", embedding_dim)
  self:register_parameter("weight", util.parameter(function()
    return init.normal_(ddp.empty(num_embeddings, embedding_dim, util.tensor_opts(opts)))
  end))
end

function Embedding:forward(ids)
  if not ddp.is_tensor(ids) or ids:dtype() ~= "int64" then
    E.raise(string.format("%s: expected an int64 tensor of ids 1..%d, got %s", tostring(self), self.num_embeddings,
      ddp.is_tensor(ids) and ids:dtype() .. " tensor" or type(ids)))
  end
  return ddp.embedding(ids, self.weight)
end

function Embedding:extra_repr() return string.format("%d, %d", self.num_embeddings, self.embedding_dim) end

return Embedding
