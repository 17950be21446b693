package fulmen

/*
#include <fulmen.h>
*/
import "C"

import "runtime"

// MetricKind is what a Metric computes (fulmen_metric_kind).
type MetricKind int32

const (
	// MetricAccuracy is the accuracy.
	MetricAccuracy MetricKind = C.FULMEN_METRIC_KIND_ACCURACY
	// MetricPrecision is tp / (tp + fp).
	MetricPrecision MetricKind = C.FULMEN_METRIC_KIND_PRECISION
	// MetricRecall is tp / (tp + fn).
	MetricRecall MetricKind = C.FULMEN_METRIC_KIND_RECALL
	// MetricF1 is 2 tp / (2 tp + fp + fn).
	MetricF1 MetricKind = C.FULMEN_METRIC_KIND_F1
	// MetricAUROC is the area under the ROC curve.
	MetricAUROC MetricKind = C.FULMEN_METRIC_KIND_AUROC
	// MetricMAE is the mean absolute error.
	MetricMAE MetricKind = C.FULMEN_METRIC_KIND_MEAN_ABSOLUTE_ERROR
	// MetricMSE is the mean squared error.
	MetricMSE MetricKind = C.FULMEN_METRIC_KIND_MEAN_SQUARED_ERROR
	// MetricRMSE is the root mean squared error.
	MetricRMSE MetricKind = C.FULMEN_METRIC_KIND_ROOT_MEAN_SQUARED_ERROR
)

// Average is how per-class scores combine (fulmen_average).
type Average int32

const (
	// AverageMicro sums the counts over classes first.
	AverageMicro Average = C.FULMEN_AVERAGE_MICRO
	// AverageMacro is the unweighted mean over the classes that occur.
	AverageMacro Average = C.FULMEN_AVERAGE_MACRO
	// AverageWeighted weights each class by its support.
	AverageWeighted Average = C.FULMEN_AVERAGE_WEIGHTED
)

// Metric accumulates predictions and targets over an epoch: Update with
// each batch, Compute at the end (a collective in a distributed job with
// SyncOnCompute), Reset for the next.
type Metric struct {
	h handle[*C.fulmen_metric]
}

// NewMetric builds a metric with an empty state (fulmen_metric_new).
func NewMetric(o MetricOptions) (*Metric, error) {
	c := o.c()
	var out *C.fulmen_metric
	if err := check(C.fulmen_metric_new(&c, &out)); err != nil {
		return nil, err
	}
	m := &Metric{}
	m.h.store(out)
	runtime.SetFinalizer(m, (*Metric).Close)
	return m, nil
}

func (m *Metric) ptr() *C.fulmen_metric {
	if m == nil {
		gcStress()
		return nil
	}
	h := m.h.load()
	gcStress()
	return h
}

// Update adds a batch of predictions and targets.
func (m *Metric) Update(preds, target *Tensor) error {
	err := check(C.fulmen_metric_update(m.ptr(), preds.ptr(), target.ptr()))
	runtime.KeepAlive(m)
	runtime.KeepAlive(preds)
	runtime.KeepAlive(target)
	return err
}

// Compute returns the value over everything since the last Reset.
func (m *Metric) Compute() (float64, error) {
	var v C.double
	err := check(C.fulmen_metric_compute(m.ptr(), &v))
	runtime.KeepAlive(m)
	return float64(v), err
}

// Reset forgets the accumulated state.
func (m *Metric) Reset() error {
	err := check(C.fulmen_metric_reset(m.ptr()))
	runtime.KeepAlive(m)
	return err
}

// Close frees the metric; idempotent. The error is always nil.
func (m *Metric) Close() error {
	if m == nil {
		return nil
	}
	if h := m.h.take(); h != nil {
		C.fulmen_metric_free(h)
		runtime.SetFinalizer(m, nil)
	}
	return nil
}
