module github.com/fulmen-ml/fulmen/bindings/go

go 1.22
