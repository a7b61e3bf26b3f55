// The API's compact encoding (`encoding: "b64"`): every matrix is a typed array
// {dtype: "u1" | "f2" | "f4", bdata: base64, shape: "rows, cols"}, the form Plotly.js reads.
//
// decodeResponse() turns an answer into what the figure functions take:
//   * u1 (thumbnails, masks): a Uint8Array per row, kept typed (the grid canvas reads them);
//   * f4 / f2 (weights, scores, q/k/v): plain arrays of numbers per row, NaN (a masked score)
//     as null, exactly what the plain JSON encoding gives; f2 is widened here, Plotly has no f2.
// A field of an object is decoded when it is first read (a getter that then becomes the field), so
// the fields no view on screen draws (q, k, the unscaled pattern in the head view) cost nothing.

const TYPES = { u1: Uint8Array, f4: Float32Array };

export function isTypedSpec(x) {
  return x !== null && typeof x === "object" && typeof x.dtype === "string" && typeof x.bdata === "string";
}

function bytesOf(b64) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(b64); // the browser's own decoder, where it has one
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * IEEE half floats (little-endian uint16) to a Float32Array, bit by bit: a normal half's exponent rebiased
 * and its fraction shifted into place, infinities and NaN kept, subnormals scaled (fraction · 2⁻²⁴). Every
 * half is exactly a float32, so nothing rounds.
 */
export function halvesToFloats(halves) {
  const out = new Float32Array(halves.length);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < halves.length; i++) {
    const h = halves[i];
    const sign = (h & 0x8000) << 16;
    const exp = h & 0x7c00;
    const frac = h & 0x03ff;
    if (exp === 0x7c00) bits[i] = sign | 0x7f800000 | (frac << 13);
    else if (exp !== 0) bits[i] = sign | ((exp + 0x1c000) << 13) | (frac << 13);
    else out[i] = (sign ? -frac : frac) * 2 ** -24;
  }
  return out;
}

/** One typed-array spec -> flat typed array and its shape. */
export function flat(spec) {
  const bytes = bytesOf(spec.bdata);
  const shape = String(spec.shape ?? "")
    .split(",")
    .map((s) => Number.parseInt(s, 10))
    .filter(Number.isFinite);
  let values;
  if (spec.dtype === "f2") {
    values = halvesToFloats(new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2));
  } else {
    const T = TYPES[spec.dtype];
    if (!T) throw new Error(`unknown dtype ${spec.dtype}`);
    values = new T(bytes.buffer, bytes.byteOffset, bytes.length / T.BYTES_PER_ELEMENT);
  }
  return { values, shape: shape.length ? shape : [values.length] };
}

/** A spec as rows: typed rows for u1, number arrays (NaN -> null) for floats. */
export function decodeTyped(spec) {
  const { values, shape } = flat(spec);
  const isFloat = spec.dtype !== "u1";
  if (shape.length === 1) return isFloat ? plain(values) : values;
  const [rows, cols] = shape;
  const out = new Array(rows);
  for (let r = 0; r < rows; r++) {
    const row = values.subarray(r * cols, (r + 1) * cols);
    out[r] = isFloat ? plain(row) : row;
  }
  return out;
}

/**
 * Floats as a plain array, NaN as null, copied in one loop: a row without NaN stays an array of unboxed
 * doubles (ten times faster than `Array.from`, which walks the typed array's iterator).
 */
function plain(a) {
  const n = a.length;
  const out = new Array(n);
  for (let j = 0; j < n; j++) {
    const v = a[j];
    out[j] = v === v ? v : null; // NaN !== NaN
  }
  return out;
}

/**
 * `obj[key]`, a typed-array spec, decoded on its first read; the object read becomes a plain field.
 * A copy of the accessor (`copyFields`) shares the decoded value: it is decoded once.
 */
function decodeLazily(obj, key, spec) {
  let value;
  const plainField = (target, v) =>
    Object.defineProperty(target, key, { value: v, writable: true, enumerable: true, configurable: true });
  Object.defineProperty(obj, key, {
    get() {
      value ??= decodeTyped(spec);
      plainField(this, value);
      return value;
    },
    set(v) {
      plainField(this, v);
    },
    enumerable: true,
    configurable: true,
  });
}

/** Whether `obj[key]` is a typed-array field not decoded yet (decodeLazily): reading it would decode it. */
export const isUndecoded = (obj, key) => typeof Object.getOwnPropertyDescriptor(obj, key)?.get === "function";

/** A new object with `src`'s own fields but those named in `skip`, none decoded by the copy (decodeLazily). */
export function copyFields(src, skip = []) {
  const out = {};
  for (const [key, d] of Object.entries(Object.getOwnPropertyDescriptors(src)))
    if (!skip.includes(key)) Object.defineProperty(out, key, d);
  return out;
}

/** Every typed-array spec in an answer, decoded in place (plain JSON answers pass through). */
export function decodeResponse(body) {
  if (!body || typeof body !== "object" || body.encoding !== "b64") return body;
  const walk = (x) => {
    if (Array.isArray(x)) {
      for (let i = 0; i < x.length; i++) x[i] = isTypedSpec(x[i]) ? decodeTyped(x[i]) : walk(x[i]);
      return x;
    }
    if (x !== null && typeof x === "object") {
      for (const key of Object.keys(x)) {
        if (isTypedSpec(x[key])) decodeLazily(x, key, x[key]);
        else walk(x[key]);
      }
    }
    return x;
  };
  return walk(body);
}
