-- ddplua.data: datasets (TensorDataset, FashionMNIST, Subset, random_split),
-- samplers (Sequential, Random, Distributed), the DataLoader, and CSVImageDataset with its transforms. The dataset protocol is described in
-- ddplua/data/dataset.lua, the sampler protocol in ddplua/data/sampler.lua.
local dataset = require "ddplua.data.dataset"
local sampler = require "ddplua.data.sampler"

return {
  TensorDataset = dataset.TensorDataset,
  Subset = dataset.Subset,
  random_split = dataset.random_split,
  FashionMNIST = require "ddplua.data.fashion_mnist",
  SequentialSampler = sampler.SequentialSampler,
  RandomSampler = sampler.RandomSampler,
  DistributedSampler = require "ddplua.data.distributed_sampler",
  DataLoader = require "ddplua.data.dataloader",
  CSVImageDataset = require "ddplua.data.csv_image",
  transforms = require "ddplua.data.transforms",
}
