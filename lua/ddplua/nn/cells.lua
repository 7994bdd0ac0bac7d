-- (filled in by its author: a family of modules and functional forms; nn/init.lua and nn/functional.lua merge
-- `modules` into nn and `F` into nn.F)
return { modules = {}, F = {} }
