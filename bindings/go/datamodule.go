package fulmen

/*
#include <stdlib.h>
#include <fulmen.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"reflect"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// DataModule is Lightning's LightningDataModule: the data of a run apart
// from the module. The trainer calls, in Lightning's order, PrepareData
// (once per node, on local rank 0; see DataModulePerNode), Setup(stage) before the module's setup
// hook, the dataloaders it implements when the loops want them (the
// optional DataModuleTrain, DataModuleVal, DataModuleTest and
// DataModulePredict; the module's own ModuleFuncs dataloaders serve what
// it lacks), and Teardown(stage) at the end, also after a run that failed
// once Setup had returned. stage is "fit", "validate", "test" or
// "predict". Its state is saved in checkpoints under its name
// (DataModuleNamer, or its Go type's name, as Lightning uses the class
// name) when it is a DataModuleState. The methods run as the module's functions do (see
// ModuleFuncs).
type DataModule interface {
	PrepareData() error
	Setup(stage string) error
	Teardown(stage string) error
}

// DataModuleTrain is a DataModule with Lightning's train_dataloader: the
// training data for epoch, taken by the library (do not use it again).
type DataModuleTrain interface {
	TrainDataloader(epoch int64) (*Loader, error)
}

// DataModuleVal is a DataModule with Lightning's val_dataloader (none: no
// validation).
type DataModuleVal interface {
	ValDataloader(epoch int64) ([]*Loader, error)
}

// DataModuleTest is a DataModule with Lightning's test_dataloader.
type DataModuleTest interface {
	TestDataloader(epoch int64) ([]*Loader, error)
}

// DataModulePredict is a DataModule with Lightning's predict_dataloader.
type DataModulePredict interface {
	PredictDataloader(epoch int64) ([]*Loader, error)
}

// DataModuleState is a DataModule with Lightning's state_dict /
// load_state_dict, as bytes (at most FULMEN_MAX_DATAMODULE_STATE; empty:
// nothing saved).
type DataModuleState interface {
	StateDict() ([]byte, error)
	LoadStateDict(state []byte) error
}

// DataModulePerNode is a DataModule with Lightning's
// prepare_data_per_node: false calls PrepareData on global rank 0 only
// (data on storage every node shares); true, or a DataModule without the
// method, on local rank 0 of every node.
type DataModulePerNode interface {
	PrepareDataPerNode() bool
}

// DataModuleNamer names a DataModule's state in checkpoints.
type DataModuleNamer interface {
	DataModuleName() string
}

// dataModuleState is what the userdata handle of a datamodule refers to.
type dataModuleState struct {
	dm    DataModule
	state unsafe.Pointer // C copy of what StateDict last gave
}

func (s *dataModuleState) freeState() {
	if s.state != nil {
		C.free(s.state)
		s.state = nil
	}
}

// dataModuleName is the name dm's state is saved under.
func dataModuleName(dm DataModule) string {
	if n, ok := dm.(DataModuleNamer); ok {
		return n.DataModuleName()
	}
	t := reflect.TypeOf(dm)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() == "" {
		return "LightningDataModule"
	}
	return t.Name()
}

// withDataModule runs call with a C datamodule over dm (freed afterwards)
// and the checkpoint argument, inside withCallbacks.
func (t *Trainer) withDataModule(ctx context.Context, module *LightningModule, dm DataModule, opts []RunOption,
	call func(d *C.fulmen_datamodule, ckpt *C.char) *C.fulmen_error) error {
	var slots C.unsigned
	if _, ok := dm.(DataModuleTrain); ok {
		slots |= C.FULMEN_GO_DM_TRAIN
	}
	if _, ok := dm.(DataModuleVal); ok {
		slots |= C.FULMEN_GO_DM_VAL
	}
	if _, ok := dm.(DataModuleTest); ok {
		slots |= C.FULMEN_GO_DM_TEST
	}
	if _, ok := dm.(DataModulePredict); ok {
		slots |= C.FULMEN_GO_DM_PREDICT
	}
	if _, ok := dm.(DataModuleState); ok {
		slots |= C.FULMEN_GO_DM_STATE
	}
	st := &dataModuleState{dm: dm}
	h := cgo.NewHandle(st)
	name := cString(dataModuleName(dm))
	defer freeCString(name)
	var d *C.fulmen_datamodule
	if err := check(C.fulmen_go_datamodule_new(C.uintptr_t(h), slots, name, &d)); err != nil {
		h.Delete() // the library does not call userdata_free on failure
		return err
	}
	if p, ok := dm.(DataModulePerNode); ok {
		if err := check(C.fulmen_datamodule_set_prepare_data_per_node(d, C.bool(p.PrepareDataPerNode()))); err != nil {
			C.fulmen_datamodule_free(d)
			return err
		}
	}
	ckpt := ckptArg(opts)
	defer freeCString(ckpt)
	err := withCallbacks(ctx, func() *C.fulmen_error { return call(d, ckpt) })
	C.fulmen_datamodule_free(d)
	st.freeState()
	runtime.KeepAlive(t)
	runtime.KeepAlive(module)
	return err
}

// FitDataModule is Lightning's trainer.fit(model, datamodule=dm): Fit on
// dm's loaders (fulmen_trainer_fit_datamodule). With CkptPath it resumes,
// giving dm the state the checkpoint holds for it.
func (t *Trainer) FitDataModule(ctx context.Context, module *LightningModule, dm DataModule, opts ...RunOption) error {
	return t.withDataModule(ctx, module, dm, opts, func(d *C.fulmen_datamodule, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_fit_datamodule(t.ptr(), module.ptr(), nil, nil, d, ckpt)
	})
}

// ValidateDataModule is Lightning's trainer.validate(model, datamodule=dm).
func (t *Trainer) ValidateDataModule(ctx context.Context, module *LightningModule, dm DataModule, opts ...RunOption) ([]map[string]float64, error) {
	return t.evalResultsAfter(t.withDataModule(ctx, module, dm, opts, func(d *C.fulmen_datamodule, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_validate_datamodule(t.ptr(), module.ptr(), nil, d, ckpt)
	}))
}

// TestDataModule is Lightning's trainer.test(model, datamodule=dm).
func (t *Trainer) TestDataModule(ctx context.Context, module *LightningModule, dm DataModule, opts ...RunOption) ([]map[string]float64, error) {
	return t.evalResultsAfter(t.withDataModule(ctx, module, dm, opts, func(d *C.fulmen_datamodule, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_test_datamodule(t.ptr(), module.ptr(), nil, d, ckpt)
	}))
}

// PredictDataModule is Lightning's trainer.predict(model, datamodule=dm):
// one output per loader of dm's predict dataloader (nil where no step
// produced one).
func (t *Trainer) PredictDataModule(ctx context.Context, module *LightningModule, dm DataModule, opts ...RunOption) ([]*Tensor, error) {
	// The library writes C pointers (only) into this Go slice.
	outs := make([]*C.fulmen_tensor, C.FULMEN_LOADERS_MAX)
	var n C.size_t
	err := t.withDataModule(ctx, module, dm, opts, func(d *C.fulmen_datamodule, ckpt *C.char) *C.fulmen_error {
		return C.fulmen_trainer_predict_datamodule(t.ptr(), module.ptr(), nil, d, ckpt, &outs[0], C.size_t(len(outs)), &n)
	})
	if err != nil {
		return nil, err
	}
	result := make([]*Tensor, int(n))
	for i := range result {
		if outs[i] != nil {
			result[i] = newTensor(outs[i])
		}
	}
	return result, nil
}
