/** Animated GIF from RGBA frames (gifenc: quantise each frame to 256 colours). Pure: no DOM. */
import { applyPalette, GIFEncoder, quantize } from 'gifenc';

export interface RgbaFrame {
  /** width · height · 4 bytes, row-major RGBA */
  data: Uint8Array | Uint8ClampedArray;
  width: number;
  height: number;
}

export interface GifOptions {
  /** per frame, in ms (GIF stores hundredths of a second) */
  delayMs?: number;
  /** the last frame holds longer, so the answer stays up before the loop restarts */
  lastDelayMs?: number;
  /** 0 = loop forever, -1 = play once */
  repeat?: number;
}

/** Encode frames of one size into an animated GIF89a. */
export function encodeGif(frames: readonly RgbaFrame[], opts: GifOptions = {}): Uint8Array {
  if (!frames.length) {
    throw new Error('a GIF needs at least one frame');
  }
  const { width, height } = frames[0];
  const delay = opts.delayMs ?? 1000;
  const lastDelay = opts.lastDelayMs ?? delay;
  const gif = GIFEncoder();
  frames.forEach((f, i) => {
    if (f.width !== width || f.height !== height) {
      throw new Error(`frame ${i} is ${f.width}×${f.height}, the first is ${width}×${height}`);
    }
    if (f.data.length !== width * height * 4) {
      throw new Error(`frame ${i} has ${f.data.length} bytes, expected ${width * height * 4} (RGBA)`);
    }
    const palette = quantize(f.data, 256);
    const index = applyPalette(f.data, palette);
    gif.writeFrame(index, width, height, { palette, delay: i === frames.length - 1 ? lastDelay : delay, repeat: opts.repeat ?? 0 });
  });
  gif.finish();
  return gif.bytes();
}
