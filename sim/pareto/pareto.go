// Package pareto draws tidal-sim's cost against cold starts: one point per
// configuration (idle pod-seconds across, the cold-start rate of the
// 75th-percentile function up), the points of one sweep joined and
// labelled, into a PNG, as in Shahrad et al.'s Pareto figures.
package pareto

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tidalscale/tidal/sim/timeplot"
)

// Point is one configuration's result.
type Point struct {
	// X is the cost (idle pod-hours, say), Y the cold starts (a percentage).
	X, Y float64
	// Label is written beside the point ("10m"); empty for none.
	Label string
}

// Series is the points of one sweep (or a single configuration), joined
// in the given order.
type Series struct {
	Name   string
	Points []Point
}

var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// Panel is one plot of series.
type Panel struct {
	Title, XLabel, YLabel string
	Series                []Series
}

// Write draws the panels, one under the other, into a PNG at path.
func Write(path string, panels []Panel) error {
	rows := make([][]*plot.Plot, 0, len(panels))
	for _, pn := range panels {
		p, err := draw1(pn)
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{p})
	}
	if len(rows) == 0 {
		return fmt.Errorf("pareto: no panel")
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadY: 6 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter,
		PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	if err := timeplot.SaveColumn(path, rows, 20*vg.Centimeter, vg.Length(13*len(rows))*vg.Centimeter, tiles); err != nil {
		return fmt.Errorf("pareto: %w", err)
	}
	return nil
}

func draw1(pn Panel) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.Title
	p.X.Label.Text = pn.XLabel
	p.Y.Label.Text = pn.YLabel
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	n := 0
	for i, s := range pn.Series {
		if len(s.Points) == 0 {
			continue
		}
		n++
		xys := make(plotter.XYs, len(s.Points))
		labels := plotter.XYLabels{XYs: make(plotter.XYs, len(s.Points)), Labels: make([]string, len(s.Points))}
		for j, pt := range s.Points {
			xys[j] = plotter.XY{X: pt.X, Y: pt.Y}
			labels.XYs[j] = xys[j]
			labels.Labels[j] = pt.Label
		}
		c := palette[i%len(palette)]
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("pareto %s: %w", s.Name, err)
		}
		line.Color, line.Width = c, vg.Points(1.5)
		points.Color, points.Shape, points.Radius = c, draw.CircleGlyph{}, vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		lab, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, fmt.Errorf("pareto %s: %w", s.Name, err)
		}
		for k := range lab.TextStyle {
			lab.TextStyle[k].Color = c
			lab.TextStyle[k].Font.Size = vg.Points(8)
		}
		lab.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
		p.Add(lab)
	}
	if n == 0 {
		return nil, fmt.Errorf("pareto %s: no points", pn.Title)
	}
	return p, nil
}
