-- nn.Embedding(num_embeddings, embedding_dim [, {dtype=, device=}]): a
-- lookup table of N(0, 1) rows; ids are int64 positions 1..num_embeddings.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"

local Embedding = Module:extend("Embedding")

function Embedding:__init(num_embeddings, embedding_dim, opts)
  opts = util.check_opts("Embedding", opts, { "dtype", "device" })
  self.num_embeddings = util.check_int("Embedding", "num_embeddings", num_embeddings)
  self.embedding_dim = util.check_int("Embedding", "embedding_dim", embedding_dim)
  self:register_parameter("weight", util.parameter(function()
    return init.normal_(ddp.empty(num_embeddings, embedding_dim, util.tensor_opts(opts)))
  end))
end

function Embedding:forward(ids)
  if not ddp.is_tensor(ids) or ids:dtype() ~= "int64" then
    error(string.format("%s: expected an int64 tensor of ids 1..%d, got %s", tostring(self), self.num_embeddings,
      ddp.is_tensor(ids) and ids:dtype() .. " tensor" or type(ids)), 2)
  end
  return ddp.embedding(ids, self.weight)
end

function Embedding:extra_repr() return string.format("%d, %d", self.num_embeddings, self.embedding_dim) end

return Embedding
