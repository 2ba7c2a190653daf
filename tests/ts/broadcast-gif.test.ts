/** src/render/gif.ts: RGBA frames in, an animated GIF89a out. */
import { describe, expect, it } from 'vitest';
import { encodeGif, RgbaFrame } from '../../src/render/broadcast/gif';
import { countGifControlExtensions, countGifImages } from './broadcast-fixtures';

function frame(w: number, hgt: number, paint: (x: number, y: number) => [number, number, number]): RgbaFrame {
  const data = new Uint8ClampedArray(w * hgt * 4);
  for (let y = 0; y < hgt; y++) {
    for (let x = 0; x < w; x++) {
      const [r, g, b] = paint(x, y);
      data.set([r, g, b, 255], (y * w + x) * 4);
    }
  }
  return { data, width: w, height: hgt };
}

describe('encodeGif', () => {
  it('writes a looping GIF89a with one image per frame', () => {
    const frames = [0, 1, 2, 3].map(k => frame(40, 24, (x, y) => (x < 10 * (k + 1) ? [0, 114, 178] : y % 2 ? [230, 159, 0] : [255, 255, 255])));
    const bytes = encodeGif(frames, { delayMs: 1000, lastDelayMs: 3000 });
    expect(new TextDecoder().decode(bytes.slice(0, 6))).toBe('GIF89a');
    // logical screen = frame size
    expect(bytes[6] | (bytes[7] << 8)).toBe(40);
    expect(bytes[8] | (bytes[9] << 8)).toBe(24);
    expect(countGifImages(bytes)).toBe(4);
    expect(countGifControlExtensions(bytes)).toBeGreaterThanOrEqual(4);
    expect(bytes[bytes.length - 1]).toBe(0x3b);
    // the NETSCAPE2.0 loop extension
    expect(new TextDecoder().decode(bytes)).toContain('NETSCAPE2.0');
  });

  it('stores the delays in hundredths of a second, the last frame longer', () => {
    const frames = [0, 1, 2].map(k => frame(8, 8, () => [k * 80, 0, 0]));
    const bytes = encodeGif(frames, { delayMs: 1000, lastDelayMs: 2500 });
    const delays: number[] = [];
    for (let i = 0; i + 5 < bytes.length; i++) {
      if (bytes[i] === 0x21 && bytes[i + 1] === 0xf9 && bytes[i + 2] === 0x04) {
        delays.push(bytes[i + 4] | (bytes[i + 5] << 8));
      }
    }
    expect(delays).toEqual([100, 100, 250]);
  });

  it('refuses no frames and frames of different sizes', () => {
    expect(() => encodeGif([])).toThrow('at least one frame');
    expect(() => encodeGif([frame(4, 4, () => [0, 0, 0]), frame(5, 4, () => [0, 0, 0])])).toThrow('frame 1 is 5×4');
    expect(() => encodeGif([{ data: new Uint8Array(3), width: 4, height: 4 }])).toThrow('expected 64');
  });
});
