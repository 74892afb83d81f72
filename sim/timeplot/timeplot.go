// Package timeplot draws what `make run` and tidal-sim plot: per target (or
// configuration), the offered load and what the decider observed above the
// desired and ready replicas, over one time axis, into a PNG.
package timeplot

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one moment of a series.
type Point struct {
	// Seconds since the start.
	Seconds float64
	// Load is the offered rate.
	Load float64
	// Observed is the decider's input (concurrency, or lag), if HasObserved.
	Observed    float64
	HasObserved bool
	// Desired is the decider's desired scale; negative when unknown.
	Desired int32
	// Ready is the ready pods; negative when unknown.
	Ready int32
}

// Series is one target's (or configuration's) points.
type Series struct {
	Name string
	// LoadUnit is "requests/s" or "records/s".
	LoadUnit string
	Points   []Point
}

var (
	colLoad     = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colObserved = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	colDesired  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colReady    = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// Write draws every series as two rows (load; replicas) into a PNG at path.
func Write(path string, series []Series) error {
	rows := make([][]*plot.Plot, 0, 2*len(series))
	for _, t := range series {
		load, observed, desired, ready := plotter.XYs{}, plotter.XYs{}, plotter.XYs{}, plotter.XYs{}
		for _, s := range t.Points {
			load = append(load, plotter.XY{X: s.Seconds, Y: s.Load})
			if s.HasObserved {
				observed = append(observed, plotter.XY{X: s.Seconds, Y: s.Observed})
			}
			if s.Desired >= 0 {
				desired = append(desired, plotter.XY{X: s.Seconds, Y: float64(s.Desired)})
			}
			if s.Ready >= 0 {
				ready = append(ready, plotter.XY{X: s.Seconds, Y: float64(s.Ready)})
			}
		}
		top := plot.New()
		top.Title.Text = t.Name + ": load"
		top.Y.Label.Text = t.LoadUnit
		if t.LoadUnit == "requests/s" {
			top.Y.Label.Text = "req/s; concurrency"
		}
		top.Legend.Top = true
		obsName := "observed concurrency (panic window)"
		if t.LoadUnit == "records/s" {
			obsName = "observed lag (records)"
		}
		if err := addLine(top, load, "offered load ("+t.LoadUnit+")", colLoad, true); err != nil {
			return err
		}
		if err := addLine(top, observed, obsName, colObserved, false); err != nil {
			return err
		}
		bottom := plot.New()
		bottom.Title.Text = t.Name + ": replicas"
		bottom.X.Label.Text = "seconds since start"
		bottom.Y.Label.Text = "pods"
		bottom.Y.Min = 0
		bottom.Legend.Top = true
		if err := addLine(bottom, ready, "ready pods", colReady, true); err != nil {
			return err
		}
		if err := addLine(bottom, desired, "desired (decider)", colDesired, true); err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{top}, []*plot.Plot{bottom})
	}
	if len(rows) == 0 {
		return fmt.Errorf("plot: no series")
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	return SaveColumn(path, rows, vg.Length(28)*vg.Centimeter, vg.Length(9*len(rows))*vg.Centimeter/2+vg.Centimeter, tiles)
}

// SaveColumn writes rows, one plot each, aligned in one column of a w by h
// PNG at path, tiles setting the padding.
func SaveColumn(path string, rows [][]*plot.Plot, w, h vg.Length, tiles draw.Tiles) error {
	img := vgimg.New(w, h)
	canvases := plot.Align(rows, tiles, draw.New(img))
	for i, row := range rows {
		row[0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func addLine(p *plot.Plot, xys plotter.XYs, name string, c color.Color, step bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if step {
		l.StepStyle = plotter.PostStep
	}
	if c == colDesired {
		// Drawn over the ready pods, which mostly equal it.
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
