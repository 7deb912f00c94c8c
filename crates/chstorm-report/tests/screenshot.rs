//! Renders the synthetic report in headless Chromium and checks the screenshot is not blank.
//!
//! Skipped (with a message) when `/usr/bin/chromium` is missing. Set `CHSTORM_REPORT_SCREENSHOT`
//! to a path to keep the PNG (that is how `docs/img/report-example.png` is made).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const BACKGROUND: [u8; 3] = [255, 255, 255];

/// Runs Chromium headless on `html` and writes a 1366×900 screenshot to `png`; kills it after 60 s.
fn screenshot(html: &Path, png: &Path, profile: &Path) -> Result<(), String> {
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--window-size=1366,900")
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {CHROMIUM}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("chromium did not finish within 60 s".into());
            }
            Err(e) => return Err(format!("waiting for chromium: {e}")),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !png.exists() {
        return Err(format!("no screenshot; chromium said: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// RGB pixels of a PNG, with its width and height.
fn decode(png_path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let file = std::fs::File::open(png_path).expect("open png");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let channels = info.color_type.samples();
    let data = &buf[..info.buffer_size()];
    let pixels = data
        .chunks_exact(channels)
        .map(|c| match channels {
            1 | 2 => [c[0], c[0], c[0]],
            _ => [c[0], c[1], c[2]],
        })
        .collect();
    (info.width, info.height, pixels)
}

fn hex(c: &str) -> [u8; 3] {
    let v = u32::from_str_radix(c.trim_start_matches('#'), 16).unwrap();
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

fn near(a: [u8; 3], b: [u8; 3], tol: i32) -> bool {
    a.iter().zip(b).all(|(&x, y)| (x as i32 - y as i32).abs() <= tol)
}

#[test]
fn report_renders_in_chromium() {
    if !Path::new(CHROMIUM).exists() {
        println!("SKIP: chromium not installed (run scripts/install-deps with EXTRA_PKGS=chromium)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let png_path = dir.path().join("report.png");
    let profile = dir.path().join("profile");
    std::fs::create_dir_all(&profile).unwrap();
    let input = common::synthetic_input();
    chstorm_report::write_sweep(&html, &input).unwrap();
    screenshot(&html, &png_path, &profile).unwrap();
    if let Ok(keep) = std::env::var("CHSTORM_REPORT_SCREENSHOT") {
        std::fs::copy(&png_path, &keep).expect("copy screenshot");
    }

    let (w, h, pixels) = decode(&png_path);
    assert_eq!((w, h), (1366, 900));
    let total = pixels.len() as f64;
    let ink = pixels.iter().filter(|&&p| !near(p, BACKGROUND, 6)).count() as f64;
    println!("screenshot {w}x{h}: {:.1}% of pixels are not background", 100.0 * ink / total);
    assert!(ink / total > 0.05, "screenshot is nearly blank: {:.2}% ink", 100.0 * ink / total);
    // The variants' colours show: at least 4 of the palette, each on a fair number of pixels.
    let seen: Vec<&str> = chstorm_report::svg::PALETTE
        .iter()
        .copied()
        .filter(|c| {
            let rgb = hex(c);
            pixels.iter().filter(|&&p| near(p, rgb, 12)).count() >= 150
        })
        .collect();
    println!("palette colours on screen: {seen:?}");
    assert!(seen.len() >= 4, "only {seen:?} of the palette on screen");
}
