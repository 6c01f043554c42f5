package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// A deliberately small SVG chart writer: bar charts and line charts with a legend, linear or
// log-10 y axes. Output depends only on the input (fixed layout, fixed number formats), so a
// re-run changes only the figures.

// colors per target, fixed so every plot reads the same way.
var targetColor = map[string]string{
	direct:    "#7f7f7f",
	haproxy:   "#1f77b4",
	stormgate: "#ff7f0e",
	baseline:  "#d62728",
}

// chart is the frame of a plot.
type chart struct {
	Title, XLabel, YLabel string
	LogY                  bool
}

const (
	svgW, svgH             = 720, 400
	padL, padR, padT, padB = 80, 170, 40, 60
	plotW, plotH           = svgW - padL - padR, svgH - padT - padB
	legendX                = svgW - padR + 16
	fontAttrs              = `font-family="sans-serif" font-size="12"`
	fontSmall              = `font-family="sans-serif" font-size="10"`
	fontTitle              = `font-family="sans-serif" font-size="15" font-weight="bold"`
)

// yAxis maps values to pixels.
type yAxis struct {
	log    bool
	lo, hi float64 // in value space (log: positive)
	ticks  []float64
}

func newYAxis(log bool, vals []float64) yAxis {
	mx, mn := 0.0, math.Inf(1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		mx = math.Max(mx, v)
		if v > 0 {
			mn = math.Min(mn, v)
		}
	}
	if log {
		if math.IsInf(mn, 1) {
			mn, mx = 1, 10
		}
		lo := math.Pow(10, math.Floor(math.Log10(mn)))
		hi := math.Pow(10, math.Ceil(math.Log10(mx)))
		if hi <= lo {
			hi = lo * 10
		}
		var ticks []float64
		for t := lo; t <= hi*1.0001; t *= 10 {
			ticks = append(ticks, t)
		}
		return yAxis{log: true, lo: lo, hi: hi, ticks: ticks}
	}
	if mx <= 0 {
		mx = 1
	}
	step := niceStep(mx / 5)
	hi := math.Ceil(mx*1.08/step) * step
	var ticks []float64
	for t := 0.0; t <= hi+step/2; t += step {
		ticks = append(ticks, t)
	}
	return yAxis{lo: 0, hi: hi, ticks: ticks}
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func (a yAxis) px(v float64) float64 {
	var f float64
	if a.log {
		if v <= 0 {
			v = a.lo
		}
		f = (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	} else {
		f = (v - a.lo) / (a.hi - a.lo)
	}
	f = math.Max(0, math.Min(1, f))
	return float64(padT) + float64(plotH)*(1-f)
}

// shortNum prints a value compactly for axes and labels: 0.25, 3.5, 42, 1.2k, 35k, 1.5M.
func shortNum(v float64) string {
	av := math.Abs(v)
	switch {
	case av >= 1e6:
		return trimZeros(strconv.FormatFloat(v/1e6, 'f', 1, 64)) + "M"
	case av >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	case av >= 1e3:
		return trimZeros(strconv.FormatFloat(v/1e3, 'f', 1, 64)) + "k"
	case av >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case av >= 10:
		return trimZeros(strconv.FormatFloat(v, 'f', 1, 64))
	case av >= 0.01 || av == 0:
		return trimZeros(strconv.FormatFloat(v, 'f', 2, 64))
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

func trimZeros(s string) string {
	for len(s) > 1 && s[len(s)-1] == '0' && bytes.ContainsRune([]byte(s), '.') {
		s = s[:len(s)-1]
	}
	if len(s) > 1 && s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}

func svgHeader(b *bytes.Buffer, c chart, y yAxis) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, svgH)
	fmt.Fprintf(b, `<text x="%d" y="24" %s>%s</text>`+"\n", padL, fontTitle, esc(c.Title))
	for _, t := range y.ticks {
		yp := y.px(t)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", padL, yp, padL+plotW, yp)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" %s text-anchor="end">%s</text>`+"\n", padL-6, yp+4, fontAttrs, shortNum(t))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", padL, padT, padL, padT+plotH)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(b, `<text x="%d" y="%d" %s text-anchor="middle">%s</text>`+"\n", padL+plotW/2, svgH-12, fontAttrs, esc(c.XLabel))
	fmt.Fprintf(b, `<text transform="translate(18,%d) rotate(-90)" %s text-anchor="middle">%s</text>`+"\n", padT+plotH/2, fontAttrs, esc(c.YLabel))
}

func legend(b *bytes.Buffer, names, colors []string) {
	for i, n := range names {
		y := padT + 10 + 20*i
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", legendX, y-10, colors[i])
		fmt.Fprintf(b, `<text x="%d" y="%d" %s>%s</text>`+"\n", legendX+18, y, fontAttrs, esc(n))
	}
}

func esc(s string) string { return html.EscapeString(s) }

// barSeries is one colored set of bars, one value per group (NaN: not measured). Labels, where
// set and non-empty, replace the printed value (e.g. "≥20k" for a lower bound).
type barSeries struct {
	Name, Color string
	Values      []float64
	Labels      []string
}

// barChart draws grouped bars with their values printed above them.
func barChart(c chart, groups []string, ss []barSeries) []byte {
	var all []float64
	for _, s := range ss {
		all = append(all, s.Values...)
	}
	y := newYAxis(c.LogY, all)
	var b bytes.Buffer
	svgHeader(&b, c, y)
	gw := float64(plotW) / float64(max(len(groups), 1))
	bw := gw * 0.8 / float64(max(len(ss), 1))
	for gi, g := range groups {
		x0 := float64(padL) + gw*float64(gi) + gw*0.1
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`+"\n", float64(padL)+gw*(float64(gi)+0.5), padT+plotH+18, fontAttrs, esc(g))
		for si, s := range ss {
			if gi >= len(s.Values) {
				continue
			}
			v := s.Values[gi]
			x := x0 + bw*float64(si)
			if math.IsNaN(v) {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">n/a</text>`+"\n", x+bw/2, padT+plotH-4, fontSmall)
				continue
			}
			top := y.px(v)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, top, bw-2, float64(padT+plotH)-top, s.Color)
			label := shortNum(v)
			if gi < len(s.Labels) && s.Labels[gi] != "" {
				label = s.Labels[gi]
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s text-anchor="middle">%s</text>`+"\n", x+bw/2-1, top-3, fontSmall, esc(label))
		}
	}
	names, colors := make([]string, len(ss)), make([]string, len(ss))
	for i, s := range ss {
		names[i], colors[i] = s.Name, s.Color
	}
	legend(&b, names, colors)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// lineSeries is one colored line.
type lineSeries struct {
	Name, Color string
	Points      []Point
}

// xTick is a labelled position on the x axis.
type xTick struct {
	X     float64
	Label string
}

// lineChart draws lines over [xlo, xhi]; ticks label the x axis; vlines are dashed markers.
func lineChart(c chart, xlo, xhi float64, ticks []xTick, vlines []xTick, ss []lineSeries) []byte {
	var all []float64
	for _, s := range ss {
		for _, p := range s.Points {
			all = append(all, p.Y)
		}
	}
	y := newYAxis(c.LogY, all)
	var b bytes.Buffer
	svgHeader(&b, c, y)
	if xhi <= xlo {
		xhi = xlo + 1
	}
	px := func(x float64) float64 {
		f := math.Max(0, math.Min(1, (x-xlo)/(xhi-xlo)))
		return float64(padL) + float64(plotW)*f
	}
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", px(t.X), padT+plotH, px(t.X), padT+plotH+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`+"\n", px(t.X), padT+plotH+18, fontAttrs, esc(t.Label))
	}
	for _, v := range vlines {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4,3"/>`+"\n", px(v.X), padT, px(v.X), padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s fill="#d62728">%s</text>`+"\n", px(v.X)+3, padT+12, fontSmall, esc(v.Label))
	}
	for _, s := range ss {
		if len(s.Points) == 0 {
			continue
		}
		var path bytes.Buffer
		for i, p := range s.Points {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, px(p.X), y.px(p.Y))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", bytes.TrimSpace(path.Bytes()), s.Color)
		for _, p := range s.Points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", px(p.X), y.px(p.Y), s.Color)
		}
	}
	names, colors := make([]string, len(ss)), make([]string, len(ss))
	for i, s := range ss {
		names[i], colors[i] = s.Name, s.Color
	}
	legend(&b, names, colors)
	b.WriteString("</svg>\n")
	return b.Bytes()
}
