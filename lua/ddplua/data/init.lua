-- ddplua.data: datasets (TensorDataset, FashionMNIST, TokenFile, Subset,
-- random_split), samplers (Sequential, Random, Distributed), the DataLoader
-- (with worker processes), text tokenizers, and CSVImageDataset with its
-- transforms. The dataset protocol is described in ddplua/data/dataset.lua,
-- the sampler protocol in ddplua/data/sampler.lua.
local dataset = require "ddplua.data.dataset"
local sampler = require "ddplua.data.sampler"
local tokenizers = require "ddplua.data.tokenizers"

return {
  TensorDataset = dataset.TensorDataset,
  Subset = dataset.Subset,
  random_split = dataset.random_split,
  FashionMNIST = require "ddplua.data.fashion_mnist",
  TokenFile = require "ddplua.data.token_file",
  ByteTokenizer = tokenizers.ByteTokenizer,
  CharTokenizer = tokenizers.CharTokenizer,
  SequentialSampler = sampler.SequentialSampler,
  RandomSampler = sampler.RandomSampler,
  DistributedSampler = require "ddplua.data.distributed_sampler",
  DataLoader = require "ddplua.data.dataloader",
  --- In a DataLoader worker process: {id=, num_workers=, seed=, dataset=}
  --- (PyTorch's get_worker_info); nil in the main process.
  get_worker_info = function() return require("ddplua.data.worker_pool").info end,
  CSVImageDataset = require "ddplua.data.csv_image",
  transforms = require "ddplua.data.transforms",
}
