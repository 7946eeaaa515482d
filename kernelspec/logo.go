package kernelspec

import "embed"

// The logos are drawn once by internal/genlogo and committed; Jupyter shows
// logo-32x32.png / logo-64x64.png from the kernelspec directory.
//
//go:generate go run ./internal/genlogo logos

//go:embed logos/logo-32x32.png logos/logo-64x64.png
var logos embed.FS

// logoFiles are the names Jupyter looks for, as embedded under logos/.
var logoFiles = []string{"logo-32x32.png", "logo-64x64.png"}
