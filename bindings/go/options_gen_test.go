package fulmen

import (
	"math"
	"testing"
)

// The generated Go option structs read the library's defaults (the
// Default* functions written over the generated conversions too), and go
// to C and back unchanged, arrays element by element; the pointer fields
// are left to the callers that own the C strings.
func TestGeneratedOptionsDefaultsAndRoundTrips(t *testing.T) {
	conv := DefaultConv2dOptions(3)
	if conv.Kernel != [2]int64{3, 3} || conv.Stride != [2]int64{1, 1} || conv.Padding != [2]int64{0, 0} ||
		conv.Dilation != [2]int64{1, 1} || conv.Groups != 1 || !conv.Bias {
		t.Fatalf("DefaultConv2dOptions(3) = %+v", conv)
	}
	conv.Kernel, conv.Padding = [2]int64{3, 5}, [2]int64{1, 2}
	if back := conv2dOptionsFromC(conv.c()); back != conv {
		t.Fatalf("Conv2dOptions through C: %+v, want %+v", back, conv)
	}
	conv3d := DefaultConv3dOptions(2)
	if conv3d.Kernel != [3]int64{2, 2, 2} || conv3d.Stride != [3]int64{1, 1, 1} {
		t.Fatalf("DefaultConv3dOptions(2) = %+v", conv3d)
	}
	conv3d.Dilation = [3]int64{1, 2, 3}
	if back := conv3dOptionsFromC(conv3d.c()); back != conv3d {
		t.Fatalf("Conv3dOptions through C: %+v, want %+v", back, conv3d)
	}
	transpose := DefaultConvTransposeOptions(1, 4)
	if transpose.Dims != 1 || transpose.Kernel != [2]int64{4, 4} || transpose.OutputPadding != [2]int64{0, 0} {
		t.Fatalf("DefaultConvTransposeOptions(1, 4) = %+v", transpose)
	}
	transpose.OutputPadding = [2]int64{1, 0}
	if back := convTransposeOptionsFromC(transpose.c()); back != transpose {
		t.Fatalf("ConvTransposeOptions through C: %+v, want %+v", back, transpose)
	}

	csv := DefaultCSVOptions()
	if !csv.HasLabels || csv.Header != CSVHeaderDetect || csv.Delimiter != ',' || csv.ScaleDivisor != 1 ||
		csv.LabelName != "" || csv.FeatureColumns != nil {
		t.Fatalf("DefaultCSVOptions() = %+v", csv)
	}
	csv.Delimiter, csv.SkipRows, csv.LabelName = ';', 2, "label"
	if back := csvOptionsFromC(csv.c()); back.Delimiter != ';' || back.SkipRows != 2 || back.LabelName != "" {
		t.Fatalf("CSVOptions through C: %+v (the label name is the caller's)", back)
	}

	stopping := DefaultEarlyStoppingOptions("val_loss")
	if stopping.Monitor != "val_loss" || stopping.Patience != 3 || stopping.Mode != ModeMin ||
		!math.IsNaN(stopping.StoppingThreshold) || stopping.CheckOnTrainEpochEnd != CheckAuto {
		t.Fatalf("DefaultEarlyStoppingOptions = %+v", stopping)
	}
	backbone := DefaultBackboneFinetuningOptions()
	if backbone.Backbone != "backbone" || backbone.UnfreezeBackboneAtEpoch != 10 || backbone.BackboneInitialLR != -1 ||
		backbone.Rounding != 12 || !backbone.TrainBN {
		t.Fatalf("DefaultBackboneFinetuningOptions() = %+v", backbone)
	}
	swa := DefaultStochasticWeightAveragingOptions(0.05)
	if swa.SWALR != 0.05 || swa.SWALRs != nil || swa.SWAEpochStart != 0 || swa.SWAEpochStartFraction != 0.8 ||
		swa.AnnealingEpochs != 10 || swa.AverageOnDevice {
		t.Fatalf("DefaultStochasticWeightAveragingOptions(0.05) = %+v", swa)
	}
	averaging := DefaultWeightAveragingOptions()
	if !averaging.EMA || averaging.Decay != 0.999 || averaging.UpdateStartingAtStep != -1 ||
		averaging.UpdateStartingAtEpoch != -1 {
		t.Fatalf("DefaultWeightAveragingOptions() = %+v", averaging)
	}
	checkpoint := DefaultModelCheckpointOptions()
	if checkpoint.SaveTopK != 1 || checkpoint.EveryNEpochs != 1 || checkpoint.Mode != ModeMin ||
		checkpoint.SaveOnTrainEpochEnd != CheckAuto || !checkpoint.AutoInsertMetricName {
		t.Fatalf("DefaultModelCheckpointOptions() = %+v", checkpoint)
	}
	if metric := DefaultMetricOptions(MetricKind(99), 0); metric.Kind != 99 {
		t.Fatalf("DefaultMetricOptions keeps the kind it was given for NewMetric to refuse: %+v", metric)
	}
	if lrFind := DefaultLRFindOptions(); lrFind.NumTraining != 100 || lrFind.Mode != LRFindExponential ||
		lrFind.EarlyStopThreshold != 4 {
		t.Fatalf("DefaultLRFindOptions() = %+v", lrFind)
	}
	if finder := DefaultBatchSizeFinderOptions(); finder.BinSearch || finder.InitVal != 2 || finder.MaxVal != 8192 {
		t.Fatalf("DefaultBatchSizeFinderOptions() = %+v", finder)
	}
	if loader := DefaultLoaderOptions(); loader.BatchSize != 1 || loader.PrefetchFactor != 2 || loader.NumWorkers != 0 {
		t.Fatalf("DefaultLoaderOptions() = %+v", loader)
	}
}
