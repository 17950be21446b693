module github.com/fulmen-ml/fulmen/bench/go

go 1.22

require github.com/fulmen-ml/fulmen/bindings/go v0.0.0

replace github.com/fulmen-ml/fulmen/bindings/go => ../../bindings/go
