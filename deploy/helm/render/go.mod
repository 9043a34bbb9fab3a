module latticekv/deploy/helm/render

go 1.19
