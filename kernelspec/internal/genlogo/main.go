// Command genlogo draws the kernelspec logos (a green GPU chip with pins)
// into kernelspec/logos. It runs once, by hand, via `go generate
// ./kernelspec`; the PNGs it writes are committed and embedded.
package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
)

func main() {
	dir := "logos"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for _, n := range []int{32, 64} {
		path := filepath.Join(dir, fmt.Sprintf("logo-%dx%d.png", n, n))
		if err := write(path, draw(n)); err != nil {
			fmt.Fprintln(os.Stderr, "genlogo:", err)
			os.Exit(1)
		}
	}
}

// draw returns an n×n chip: a dark body with a bright die, pins on all sides.
func draw(n int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, n, n)) // transparent background
	u := n / 16                                   // one grid unit: 2 px at 32, 4 px at 64
	pin := color.NRGBA{0xb0, 0xb0, 0xb0, 0xff}
	body := color.NRGBA{0x1f, 0x2d, 0x1f, 0xff}
	die := color.NRGBA{0x76, 0xb9, 0x00, 0xff} // NVIDIA-ish green
	for i := 0; i < 4; i++ {                   // four pins per side
		p := (4 + 2*i) * u
		fill(img, p, 0, p+u, 3*u, pin)   // top
		fill(img, p, n-3*u, p+u, n, pin) // bottom
		fill(img, 0, p, 3*u, p+u, pin)   // left
		fill(img, n-3*u, p, n, p+u, pin) // right
	}
	fill(img, 2*u, 2*u, n-2*u, n-2*u, body)
	fill(img, 5*u, 5*u, n-5*u, n-5*u, die)
	return img
}

func fill(img *image.NRGBA, x0, y0, x1, y1 int, c color.NRGBA) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			img.SetNRGBA(x, y, c)
		}
	}
}

func write(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return f.Close()
}
