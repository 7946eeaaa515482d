package oom

import "strings"

// Framework names what ran out of GPU memory, as the user knows it.
type Framework string

// The frameworks Match tells apart.
const (
	TensorFlow Framework = "TensorFlow" // Keras on its TensorFlow backend too
	PyTorch    Framework = "PyTorch"
	JAX        Framework = "JAX" // XLA under JAX, Keras on its JAX backend
	CuPy       Framework = "CuPy"
	CUDA       Framework = "CUDA" // CUDA's own error names: numba, pycuda, cuda-python, ...
)

// Budget is how many bytes of evalue and traceback, together and from
// their start, Match looks at. A traceback is the user's to make as large
// as they like (a deep recursion, an exception that carries a dataset), and
// Match is meant for the supervisor's relay path: past the budget nothing is
// read, copied or scanned. Each traceback entry costs at least one byte
// (the line break that joins it to the next), so a traceback of many empty
// entries is bounded too.
const Budget = 64 << 10

// maxName bounds ename: a longer one is no class name Match knows.
const maxName = 256

// Match reports whether a Jupyter error reply (its content's ename, evalue
// and traceback) is a GPU out-of-memory error, and whose. The final
// exception (ename, evalue) is tried first; then each exception the
// traceback shows, first printed first, so that an out-of-memory error
// that another exception was raised while handling is still recognised.
// Source lines that a traceback quotes never match: only exception lines
// (a class name at the start of a line, then ": " and its message) count.
// Match is pure and safe for concurrent use.
func Match(ename, evalue string, traceback []string) (Framework, bool) {
	budget := Budget
	if len(ename) <= maxName {
		if f, ok := classify(stripANSI(ename), stripANSI(clip(evalue, &budget))); ok {
			return f, true
		}
	}
	var b strings.Builder
	for _, t := range traceback {
		if budget <= 0 {
			break
		}
		budget-- // the line break
		b.WriteString(clip(t, &budget))
		b.WriteByte('\n')
	}
	for _, e := range exceptions(stripANSI(b.String())) {
		if f, ok := classify(e.name, e.msg); ok {
			return f, true
		}
	}
	return "", false
}

// clip returns the start of s that fits in *budget, and takes its length
// from it.
func clip(s string, budget *int) string {
	if len(s) > *budget {
		s = s[:*budget]
	}
	*budget -= len(s)
	return s
}

// classify says whose out-of-memory error an exception is, from its class
// name (qualified, as a plain Python traceback prints it, or not, as
// Jupyter's ename has it) and its message. A message counts only on the
// classes that framework raises: a user's own exception that mentions
// memory is not a GPU's. The exceptions are CUDA's own error names
// (CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation), which only a
// CUDA allocation failure prints, whoever re-raised it.
func classify(name, msg string) (Framework, bool) {
	class := name[strings.LastIndexByte(name, '.')+1:]
	module := strings.TrimSuffix(name, class)
	switch class {
	case "OutOfMemoryError":
		// torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same
		// class) and cupy.cuda.memory.OutOfMemoryError share the name, not
		// the message. Both subclass Python's MemoryError, which is no
		// GPU's and never matches on its own.
		switch {
		case strings.HasPrefix(module, "cupy.") || strings.Contains(msg, "Out of memory allocating") ||
			strings.Contains(msg, "out of memory to allocate"):
			return CuPy, true
		case strings.HasPrefix(module, "torch.") || strings.Contains(msg, "CUDA out of memory"):
			return PyTorch, true
		}
	case "ResourceExhaustedError":
		// tensorflow.python.framework.errors_impl.ResourceExhaustedError:
		// the BFC allocator's "OOM when allocating tensor", or XLA's "Out
		// of memory while trying to allocate" under Keras 3's jit-compiled
		// steps. TensorFlow raises it for host memory too: a message that
		// names only the CPU is not a GPU's.
		if tfOOM(msg) && !cpuOnly(msg) {
			return TensorFlow, true
		}
	case "InternalError":
		// TensorFlow cannot create its context on a GPU that others fill.
		if strings.Contains(msg, "failed. Status: out of memory") {
			return TensorFlow, true
		}
	case "XlaRuntimeError", "JaxRuntimeError":
		if xlaOOM(msg) {
			return JAX, true
		}
	case "RuntimeError", "AcceleratorError":
		// PyTorch before torch.OutOfMemoryError (and for CUDA errors since
		// torch.AcceleratorError), JAX before XlaRuntimeError.
		switch {
		case torchOOM(msg):
			return PyTorch, true
		case xlaOOM(msg):
			return JAX, true
		}
	case "MemoryError":
		// pycuda._driver.MemoryError; Python's own MemoryError is the host's.
		if strings.HasPrefix(module, "pycuda.") || strings.Contains(msg, "cuMemAlloc failed: out of memory") {
			return CUDA, true
		}
	}
	if strings.Contains(msg, "CUDA_ERROR_OUT_OF_MEMORY") || strings.Contains(msg, "cudaErrorMemoryAllocation") {
		if strings.HasPrefix(module, "cupy") || class == "CUDARuntimeError" || class == "CUDADriverError" {
			return CuPy, true // cupy_backends.cuda.api.runtime / .driver
		}
		return CUDA, true
	}
	return "", false
}

func torchOOM(msg string) bool {
	for _, s := range []string{
		"CUDA out of memory",
		"CUDA error: out of memory",
		"cuda runtime error (2) : out of memory", // PyTorch < 1.0
		"CUBLAS_STATUS_ALLOC_FAILED",             // cuBLAS could not allocate its workspace
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// xlaOOM: XLA's allocator ("Out of memory while trying to allocate N
// bytes.", "Out of memory allocating N bytes."), under RESOURCE_EXHAUSTED
// (older JAX: "Resource exhausted: "). A TPU's "Ran out of memory in
// memory space vmem" is no NVIDIA GPU's.
func xlaOOM(msg string) bool {
	return (strings.Contains(msg, "RESOURCE_EXHAUSTED") || strings.Contains(msg, "Resource exhausted")) &&
		xlaAllocator(msg)
}

func xlaAllocator(msg string) bool {
	return strings.Contains(msg, "Out of memory while trying to allocate") || strings.Contains(msg, "Out of memory allocating")
}

// tfOOM: the BFC allocator's "OOM when allocating tensor", its eager
// "failed to allocate memory", or XLA's, in a jit-compiled step.
func tfOOM(msg string) bool {
	return strings.Contains(msg, "OOM when allocating") || strings.Contains(msg, "failed to allocate memory") ||
		xlaAllocator(msg)
}

// cpuOnly reports whether a TensorFlow message names the host's memory
// and no GPU's ("... on /job:localhost/replica:0/task:0/device:CPU:0 by
// allocator cpu").
func cpuOnly(msg string) bool {
	return (strings.Contains(msg, "device:CPU") || strings.Contains(msg, "allocator cpu")) &&
		!strings.Contains(msg, "GPU")
}

// exception is one exception a traceback shows.
type exception struct{ name, msg string }

// exceptionLine parses how Python (traceback.format_exception_only) and
// IPython print an exception: at the start of a line, the class name,
// qualified or not, then ": " and the first line of the message (or
// nothing, for an empty message). TensorFlow 1's session errors add
// " (see above for traceback)" after the name. The name must end in Error
// or Exception, so that "Hint: ..." or "Node: ..." lines inside a message
// are not exceptions. IPython's "NameError    Traceback (most recent call
// last)" header and quoted source lines (indented, or led by a line number
// or "---->") are not exception lines. Parsed by hand, not by a regexp:
// no allocation per line.
func exceptionLine(line string) (name string, msgAt int, ok bool) {
	i := 0
	for i < len(line) && (isIdent(line[i]) || line[i] == '.' && i > 0 && line[i-1] != '.') {
		if line[i] >= '0' && line[i] <= '9' && (i == 0 || line[i-1] == '.') {
			return "", 0, false // an identifier cannot start with a digit
		}
		i++
	}
	name = line[:i]
	if !strings.HasSuffix(name, "Error") && !strings.HasSuffix(name, "Exception") {
		return "", 0, false
	}
	rest := strings.TrimPrefix(line[i:], " (see above for traceback)")
	at := len(line) - len(rest)
	switch {
	case rest == "" || rest == ":":
		return name, len(line), true
	case strings.HasPrefix(rest, ": "):
		return name, at + 2, true
	}
	return "", 0, false
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// exceptions lists the exceptions in text, first printed first. A message
// runs on over the lines that follow its exception line (TensorFlow's
// and XLA's are several lines long) up to the next exception, traceback
// or separator line. Messages are slices of text, never built up, so the
// work is linear in its length.
func exceptions(text string) []exception {
	var out []exception
	open := false // out's last message may go on
	from := 0     // where in text out's last message starts
	for at := 0; at < len(text); {
		n := strings.IndexByte(text[at:], '\n')
		if n < 0 {
			n = len(text) - at
		}
		line := strings.TrimSuffix(text[at:at+n], "\r")
		switch name, msgAt, ok := exceptionLine(line); {
		case ok:
			from = at + msgAt
			out = append(out, exception{name: name, msg: text[from : at+len(line)]})
			open = true
		case open && ends(line):
			open = false
		case open:
			out[len(out)-1].msg = text[from : at+len(line)]
		}
		at += n + 1
	}
	return out
}

// ends reports whether line ends an exception's message: what Python and
// IPython print between chained exceptions and before a traceback
// (IPython's header is "NameError    Traceback (most recent call last)").
func ends(line string) bool {
	return strings.Contains(line, "Traceback (most recent call last)") ||
		strings.HasPrefix(line, "During handling of the above exception") ||
		strings.HasPrefix(line, "The above exception was the direct cause") ||
		strings.HasPrefix(line, "-----")
}

// stripANSI removes terminal escape sequences, as IPython colours its
// tracebacks: CSI sequences (ESC [ parameters final-byte, ECMA-48 5.4),
// OSC sequences (ESC ] ... BEL or ESC \, such as hyperlinks; also ended
// by a line break here, so that an unterminated one cannot hide the lines
// after it), and other escapes (ESC, intermediate bytes, one final byte).
func stripANSI(s string) string {
	if strings.IndexByte(s, 0x1b) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] != 0x1b {
			b.WriteByte(s[i])
			i++
			continue
		}
		i++
		if i == len(s) {
			break
		}
		switch s[i] {
		case '[':
			i++
			for i < len(s) && s[i] >= 0x20 && s[i] <= 0x3f {
				i++
			}
			if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
				i++
			}
		case ']':
			i++
			for i < len(s) && s[i] != 0x07 && s[i] != '\n' && !(s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\') {
				i++
			}
			switch {
			case i < len(s) && s[i] == 0x07:
				i++
			case i < len(s) && s[i] == 0x1b:
				i += 2
			}
		default: // ESC, intermediates 0x20-0x2f, a final byte (ECMA-35 13.2)
			for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
				i++
			}
			if i < len(s) {
				i++
			}
		}
	}
	return b.String()
}
